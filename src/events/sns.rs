//! The SNS calls of an S3 fan-out (`slate events setup … --fanout sns://TOPIC`): S3 keeps one
//! notification rule per event type and prefix, so consumers that each need every event of a
//! bucket (two daemons, a daemon and a `slate mount`) share one SNS topic, each with its own
//! queue subscribed. SNS's query API, signed with the bucket's own credentials
//! ([`S3CrossBucket::aws_query`]); answers parsed here.

use crate::stores::s3copy::S3CrossBucket;

/// SNS's endpoint: `AWS_ENDPOINT_URL_SNS`, else `AWS_ENDPOINT_URL` (an emulator serving every
/// service), else AWS's for the region.
pub fn endpoint(region: &str) -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    env("AWS_ENDPOINT_URL_SNS")
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .map(|e| format!("{}/", e.trim_end_matches('/')))
        .unwrap_or_else(|| format!("https://sns.{region}.amazonaws.com/"))
}

/// A topic's ARN ends with its name.
pub fn topic_name(arn: &str) -> &str {
    arn.rsplit(':').next().unwrap_or(arn)
}

/// One SNS subscription: its protocol and endpoint (a queue's ARN for `sqs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub protocol: String,
    pub endpoint: String,
    /// False while SNS waits for the endpoint to confirm (`PendingConfirmation`): nothing is
    /// delivered to it yet.
    pub confirmed: bool,
}

/// The topic ARNs of a `ListTopics` page and its `NextToken`.
pub fn parse_list_topics(xml: &str) -> Result<(Vec<String>, Option<String>), String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Resp {
        list_topics_result: R,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct R {
        topics: Option<Members>,
        next_token: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Members {
        #[serde(default)]
        member: Vec<M>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct M {
        topic_arn: String,
    }
    let r: Resp = quick_xml::de::from_str(xml).map_err(|e| format!("ListTopics: {e}"))?;
    Ok((
        r.list_topics_result
            .topics
            .unwrap_or_default()
            .member
            .into_iter()
            .map(|m| m.topic_arn)
            .collect(),
        r.list_topics_result.next_token.filter(|t| !t.is_empty()),
    ))
}

/// The subscriptions of a `ListSubscriptionsByTopic` page and its `NextToken`.
pub fn parse_subscriptions(xml: &str) -> Result<(Vec<Subscription>, Option<String>), String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Resp {
        list_subscriptions_by_topic_result: R,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct R {
        subscriptions: Option<Members>,
        next_token: Option<String>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Members {
        #[serde(default)]
        member: Vec<M>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct M {
        protocol: Option<String>,
        endpoint: Option<String>,
        subscription_arn: Option<String>,
    }
    let r: Resp =
        quick_xml::de::from_str(xml).map_err(|e| format!("ListSubscriptionsByTopic: {e}"))?;
    let r = r.list_subscriptions_by_topic_result;
    Ok((
        r.subscriptions
            .unwrap_or_default()
            .member
            .into_iter()
            .map(|m| Subscription {
                protocol: m.protocol.unwrap_or_default(),
                endpoint: m.endpoint.unwrap_or_default(),
                confirmed: m.subscription_arn.is_some_and(|a| a.starts_with("arn:")),
            })
            .collect(),
        r.next_token.filter(|t| !t.is_empty()),
    ))
}

/// The `Policy` attribute of a `GetTopicAttributes` answer.
pub fn parse_topic_policy(xml: &str) -> Result<Option<String>, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Resp {
        get_topic_attributes_result: R,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct R {
        attributes: Option<Entries>,
    }
    #[derive(serde::Deserialize, Default)]
    struct Entries {
        #[serde(default)]
        entry: Vec<E>,
    }
    #[derive(serde::Deserialize)]
    struct E {
        key: String,
        #[serde(default)]
        value: String,
    }
    let r: Resp = quick_xml::de::from_str(xml).map_err(|e| format!("GetTopicAttributes: {e}"))?;
    Ok(r.get_topic_attributes_result
        .attributes
        .unwrap_or_default()
        .entry
        .into_iter()
        .find(|e| e.key == "Policy")
        .map(|e| e.value))
}

/// The `<TopicArn>` of a `CreateTopic` answer.
pub fn parse_created(xml: &str) -> Result<String, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Resp {
        create_topic_result: R,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct R {
        topic_arn: String,
    }
    let r: Resp = quick_xml::de::from_str(xml).map_err(|e| format!("CreateTopic: {e}"))?;
    Ok(r.create_topic_result.topic_arn)
}

/// SNS through one bucket's credentials.
pub struct Sns<'a> {
    s3: &'a S3CrossBucket,
    endpoint: String,
}

impl<'a> Sns<'a> {
    pub fn new(s3: &'a S3CrossBucket) -> Sns<'a> {
        Sns {
            endpoint: endpoint(s3.region()),
            s3,
        }
    }

    async fn call(&self, form: &[(&str, &str)]) -> Result<String, String> {
        let mut all = vec![("Version", "2010-03-31")];
        all.extend_from_slice(form);
        let (status, body) = self.s3.aws_query("sns", &self.endpoint, &all).await?;
        let text = String::from_utf8_lossy(&body).to_string();
        if !status.is_success() {
            let action = form
                .iter()
                .find(|(k, _)| *k == "Action")
                .map(|(_, v)| *v)
                .unwrap_or("SNS");
            return Err(format!(
                "{action} answered {status} {}",
                crate::stores::s3copy::error_code(&text).unwrap_or_default()
            ));
        }
        Ok(text)
    }

    /// The ARN of the topic named `name`, None when there is none (ListTopics, every page).
    pub async fn find_topic(&self, name: &str) -> Result<Option<String>, String> {
        let mut token: Option<String> = None;
        loop {
            let mut form = vec![("Action", "ListTopics")];
            if let Some(t) = &token {
                form.push(("NextToken", t));
            }
            let (arns, next) = parse_list_topics(&self.call(&form).await?)?;
            if let Some(a) = arns.into_iter().find(|a| topic_name(a) == name) {
                return Ok(Some(a));
            }
            match next {
                Some(t) => token = Some(t),
                None => return Ok(None),
            }
        }
    }

    /// Makes the topic (SNS answers the existing one's ARN when it is there).
    pub async fn create_topic(&self, name: &str) -> Result<String, String> {
        parse_created(
            &self
                .call(&[("Action", "CreateTopic"), ("Name", name)])
                .await?,
        )
    }

    pub async fn policy(&self, topic_arn: &str) -> Result<Option<String>, String> {
        parse_topic_policy(
            &self
                .call(&[("Action", "GetTopicAttributes"), ("TopicArn", topic_arn)])
                .await?,
        )
    }

    pub async fn set_policy(&self, topic_arn: &str, policy: &str) -> Result<(), String> {
        self.call(&[
            ("Action", "SetTopicAttributes"),
            ("TopicArn", topic_arn),
            ("AttributeName", "Policy"),
            ("AttributeValue", policy),
        ])
        .await
        .map(|_| ())
    }

    pub async fn subscriptions(&self, topic_arn: &str) -> Result<Vec<Subscription>, String> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut form = vec![
                ("Action", "ListSubscriptionsByTopic"),
                ("TopicArn", topic_arn),
            ];
            if let Some(t) = &token {
                form.push(("NextToken", t));
            }
            let (subs, next) = parse_subscriptions(&self.call(&form).await?)?;
            out.extend(subs);
            match next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// Subscribes the queue to the topic (SNS answers the existing subscription when it is
    /// there).
    pub async fn subscribe_queue(&self, topic_arn: &str, queue_arn: &str) -> Result<(), String> {
        self.call(&[
            ("Action", "Subscribe"),
            ("TopicArn", topic_arn),
            ("Protocol", "sqs"),
            ("Endpoint", queue_arn),
            ("ReturnSubscriptionArn", "true"),
        ])
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_snss_answers() {
        let xml = r#"<ListTopicsResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">
  <ListTopicsResult><Topics>
      <member><TopicArn>arn:aws:sns:us-east-1:123456789012:a</TopicArn></member>
      <member><TopicArn>arn:aws:sns:us-east-1:123456789012:fan</TopicArn></member>
    </Topics><NextToken>tok</NextToken></ListTopicsResult>
  <ResponseMetadata><RequestId>x</RequestId></ResponseMetadata></ListTopicsResponse>"#;
        let (arns, next) = parse_list_topics(xml).unwrap();
        assert_eq!(arns.len(), 2);
        assert_eq!(topic_name(&arns[1]), "fan");
        assert_eq!(next.as_deref(), Some("tok"));
        let empty = "<ListTopicsResponse><ListTopicsResult><Topics/></ListTopicsResult></ListTopicsResponse>";
        assert_eq!(parse_list_topics(empty).unwrap(), (vec![], None));

        let subs = r#"<ListSubscriptionsByTopicResponse><ListSubscriptionsByTopicResult>
<Subscriptions><member><TopicArn>t</TopicArn><Protocol>sqs</Protocol>
<SubscriptionArn>arn:aws:sns:us-east-1:1:t:abc</SubscriptionArn><Owner>1</Owner><Endpoint>arn:aws:sqs:us-east-1:1:q</Endpoint></member>
<member><Protocol>sqs</Protocol><SubscriptionArn>PendingConfirmation</SubscriptionArn><Endpoint>arn:aws:sqs:us-east-1:2:q</Endpoint></member>
</Subscriptions></ListSubscriptionsByTopicResult></ListSubscriptionsByTopicResponse>"#;
        let (s, next) = parse_subscriptions(subs).unwrap();
        assert_eq!(
            s,
            vec![
                Subscription {
                    protocol: "sqs".into(),
                    endpoint: "arn:aws:sqs:us-east-1:1:q".into(),
                    confirmed: true,
                },
                Subscription {
                    protocol: "sqs".into(),
                    endpoint: "arn:aws:sqs:us-east-1:2:q".into(),
                    confirmed: false,
                }
            ]
        );
        assert_eq!(next, None);

        let attrs = r#"<GetTopicAttributesResponse><GetTopicAttributesResult><Attributes>
<entry><key>Owner</key><value>1</value></entry>
<entry><key>Policy</key><value>{"Version":"2012-10-17","Statement":[]}</value></entry>
</Attributes></GetTopicAttributesResult></GetTopicAttributesResponse>"#;
        assert_eq!(
            parse_topic_policy(attrs).unwrap().as_deref(),
            Some(r#"{"Version":"2012-10-17","Statement":[]}"#)
        );
        let created = "<CreateTopicResponse><CreateTopicResult><TopicArn>arn:aws:sns:r:1:fan</TopicArn></CreateTopicResult></CreateTopicResponse>";
        assert_eq!(parse_created(created).unwrap(), "arn:aws:sns:r:1:fan");
        assert!(parse_created("<Error/>").is_err());
    }
}
