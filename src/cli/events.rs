//! `slate events setup SRC --events URL` makes the wiring that delivers SRC's change events to
//! the queue the daemon follows; `slate events check SRC --events URL` reads it back and says
//! what is missing or wrong, one line each (exit 1 when events cannot arrive). The rules are
//! pure and table-tested in `events::wiring`; this file does the calls.
//!
//! S3 → SQS: the queue (made when missing) with a policy statement that lets the bucket
//! send, and the bucket's notification configuration with slate's entry merged in (every
//! other entry kept; one that overlaps is named and nothing is written); or, with
//! `--eventbridge`, EventBridge delivery on the bucket and a rule of slate's with the queue as
//! its target (`setup_eventbridge`). GCS → Pub/Sub and
//! Azure → Event Grid → Storage Queue: `events_gcs.rs` and `events_azure.rs` (rules in
//! `events::wiring_gcs` and `events::wiring_azure`).

use clap::{Args, Subcommand};

use crate::core::error::SlateError;
use crate::core::location::{Location, Scheme};
use crate::events::sns::Sns;
use crate::events::wiring::{self, Merge, S3Notification, Target};

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Make the wiring that delivers SRC's change events to the queue `--events` names, and
    /// print what changed (S3 → SQS: the queue, its policy, the bucket's notification entry,
    /// merged with the entries others have; GCS → Pub/Sub: topic, IAM binding, subscription,
    /// notification configuration; Azure: the queue, then Event Grid's system topic and
    /// subscription through ARM, or the `az` commands and a template to run).
    Setup(SetupArgs),
    /// Read the wiring back and print what is missing or wrong, one line each; exit 1 when
    /// events cannot arrive.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The source whose changes are followed (s3://, gs://, az://BUCKET/PREFIX, or a remote).
    pub src: String,
    /// The queue the daemon follows: sqs://QUEUE_NAME or sqs://QUEUE_URL,
    /// pubsub://projects/P/subscriptions/S, azqueue://ACCOUNT/QUEUE (made when missing).
    #[arg(long, value_name = "URL")]
    pub events: String,
    /// Print what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Send the bucket's events to this SNS topic (made when missing) and subscribe the queue
    /// to it: the way to give a second consumer (another daemon, a `slate mount`) its own
    /// queue, since S3 refuses two rules that overlap. Each consumer runs setup with the same
    /// topic and its own queue.
    #[arg(long, value_name = "sns://TOPIC")]
    pub fanout: Option<String>,
    /// S3: route the bucket's events through EventBridge instead of a notification entry:
    /// the bucket sends every event to the default bus, and a rule of slate's sends the
    /// pair's to the queue. Each consumer runs setup with its own queue and gets its own
    /// rule; the bucket's notification entries (S3 allows one per prefix) are left alone.
    #[arg(long, conflicts_with = "fanout")]
    pub eventbridge: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// What GCS and Azure sources take besides `--events`.
#[derive(Debug, Args)]
pub struct CloudArgs {
    /// GCS: the Pub/Sub topic the bucket's notifications go to, projects/P/topics/T (made
    /// when missing); default: the subscription's id in its project.
    #[arg(long, value_name = "projects/P/topics/T")]
    pub topic: Option<String>,
    /// Azure: the subscription of the storage account, for its Event Grid system topic and
    /// event subscription (made through Azure Resource Manager).
    #[arg(long, env = "AZURE_SUBSCRIPTION_ID", value_name = "ID")]
    pub subscription_id: Option<String>,
    /// Azure: the resource group of the storage account.
    #[arg(long, env = "AZURE_RESOURCE_GROUP", value_name = "RG")]
    pub resource_group: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The source whose changes are followed (s3://, gs://, az://BUCKET/PREFIX, or a remote).
    pub src: String,
    /// The queue the daemon follows (sqs://…, pubsub://…, azqueue://…).
    #[arg(long, value_name = "URL")]
    pub events: String,
    /// The SNS topic the bucket's events go through (as given to setup).
    #[arg(long, value_name = "sns://TOPIC")]
    pub fanout: Option<String>,
    /// S3: the events go through EventBridge (as given to setup).
    #[arg(long, conflicts_with = "fanout")]
    pub eventbridge: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// The topic name of `--fanout sns://TOPIC`.
fn topic_of(fanout: &Option<String>) -> Result<Option<String>, SlateError> {
    let Some(f) = fanout else { return Ok(None) };
    let name = f.strip_prefix("sns://").unwrap_or("");
    if name.is_empty()
        || name.len() > 256
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    {
        return Err(SlateError::BadOption {
            option: "--fanout".into(),
            why: format!(
                "'{f}': sns://TOPIC, a topic name of letters, digits, '-' and '_' (1-256)"
            ),
        });
    }
    Ok(Some(name.to_string()))
}

pub async fn run(args: EventsArgs) -> i32 {
    let r = match args.command {
        EventsCommand::Setup(a) => setup(a).await,
        EventsCommand::Check(a) => check(a).await,
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("slate: {e}");
            e.exit_code()
        }
    }
}

/// `--topic` names a GCS source's topic (`--subscription-id` and `--resource-group`, which may
/// come from the environment, are left unread).
fn not_for_s3(cloud: &CloudArgs) -> Result<(), SlateError> {
    match &cloud.topic {
        Some(_) => Err(SlateError::BadOption {
            option: "--topic".into(),
            why: "names a GCS source's Pub/Sub topic; an S3 source's SNS topic is --fanout".into(),
        }),
        None => Ok(()),
    }
}

/// The S3 source and the SQS queue name of a command's arguments, refused with one line when
/// the pair of transports is not one setup knows.
fn s3_and_queue(src: &str, events: &str) -> Result<(Location, QueueRef), SlateError> {
    let loc = Location::parse(src)?;
    let bad = |why: String| SlateError::BadOption {
        option: "--events".into(),
        why,
    };
    match (loc.scheme, events.split_once("://").map(|(s, _)| s)) {
        (Scheme::S3, Some("sqs")) => {}
        (Scheme::S3, _) => {
            return Err(bad(format!(
                "'{events}': an S3 source's events come through SQS: sqs://QUEUE_NAME"
            )))
        }
        (Scheme::Local, _) => {
            return Err(bad(format!(
                "'{events}': a local folder needs no wiring (the daemon watches it with inotify)"
            )))
        }
        (Scheme::Azure | Scheme::Gcs, _) => {
            return Err(bad(format!(
                "'{events}': an Azure source is wired to azqueue://ACCOUNT/QUEUE, a GCS source \
                 to pubsub://projects/P/subscriptions/S"
            )))
        }
    }
    Ok((loc, QueueRef::parse(events)?))
}

/// `sqs://NAME` or `sqs://https://…/ACCOUNT/NAME`.
struct QueueRef {
    spec: String,
    name: String,
    url: Option<String>,
}

impl QueueRef {
    fn parse(spec: &str) -> Result<QueueRef, SlateError> {
        let rest = spec.strip_prefix("sqs://").unwrap_or(spec);
        let url =
            (rest.starts_with("http://") || rest.starts_with("https://")).then(|| rest.to_string());
        let name = rest.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(SlateError::BadUrl {
                url: spec.to_string(),
                why: "an SQS queue name is 1-80 letters, digits, '-' and '_'".into(),
            });
        }
        Ok(QueueRef {
            spec: spec.to_string(),
            name: name.to_string(),
            url,
        })
    }
}

/// The queue's URL, ARN and policy; None when there is no such queue.
/// Makes queue `q` (said on stdout) and reads back its URL, ARN and policy.
async fn create_queue(
    c: &aws_sdk_sqs::Client,
    q: &QueueRef,
) -> Result<(String, String, Option<String>), SlateError> {
    let out = c
        .create_queue()
        .queue_name(&q.name)
        .send()
        .await
        .map_err(|e| crate::events::sqs::error(&q.spec, e))?;
    println!("created SQS queue {}", q.name);
    queue_state(c, q).await?.ok_or_else(|| SlateError::Queue {
        url: q.spec.clone(),
        detail: format!(
            "made as {} but not found after",
            out.queue_url.unwrap_or_default()
        ),
    })
}

async fn queue_state(
    c: &aws_sdk_sqs::Client,
    q: &QueueRef,
) -> Result<Option<(String, String, Option<String>)>, SlateError> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let url = match &q.url {
        Some(u) => u.clone(),
        None => match c.get_queue_url().queue_name(&q.name).send().await {
            Ok(o) => o.queue_url.unwrap_or_default(),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_queue_does_not_exist()) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(crate::events::sqs::error(&q.spec, e)),
        },
    };
    let attrs = match c
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(A::QueueArn)
        .attribute_names(A::Policy)
        .send()
        .await
    {
        Ok(o) => o.attributes.unwrap_or_default(),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_queue_does_not_exist()) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(crate::events::sqs::error(&q.spec, e)),
    };
    let arn = attrs
        .get(&A::QueueArn)
        .cloned()
        .ok_or_else(|| SlateError::Queue {
            url: q.spec.clone(),
            detail: "SQS named no QueueArn for the queue".into(),
        })?;
    Ok(Some((url, arn, attrs.get(&A::Policy).cloned())))
}

/// The bucket's notification configuration, read with a signed `GET ?notification`.
async fn read_notification(
    s3: &crate::stores::s3copy::S3CrossBucket,
    loc: &Location,
) -> Result<S3Notification, SlateError> {
    let (status, body) = s3
        .bucket_call("GET", "?notification", "")
        .await
        .map_err(|e| store_err(loc, format!("reading its notification configuration: {e}")))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(store_err(
            loc,
            format!(
                "reading its notification configuration answered {status} {}{}",
                crate::stores::s3copy::error_code(&text).unwrap_or_default(),
                if status.as_u16() == 403 {
                    " (needs s3:GetBucketNotification)"
                } else {
                    ""
                }
            ),
        ));
    }
    wiring::parse_notification(&text).map_err(|e| store_err(loc, e))
}

fn store_err(loc: &Location, detail: String) -> SlateError {
    SlateError::Store {
        url: format!("s3://{}", loc.bucket),
        detail,
    }
}

fn bucket_client(loc: &Location) -> Result<crate::stores::s3copy::S3CrossBucket, SlateError> {
    crate::stores::s3copy::S3CrossBucket::for_bucket(loc)?.ok_or_else(|| {
        store_err(
            loc,
            "its notification configuration is reached path style only: unset \
             AWS_VIRTUAL_HOSTED_STYLE_REQUEST (or the remote's force_path_style = false)"
                .into(),
        )
    })
}

/// What setup and check of an S3 bucket's wiring start from: the pair's bucket, the queue,
/// the fan-out topic's name, the bucket's own signed client and an SQS client.
struct S3Wiring {
    loc: Location,
    q: QueueRef,
    topic_name: Option<String>,
    s3: crate::stores::s3copy::S3CrossBucket,
    sqs: aws_sdk_sqs::Client,
}

impl S3Wiring {
    async fn open(
        src: &str,
        events: &str,
        fanout: &Option<String>,
    ) -> Result<S3Wiring, SlateError> {
        let (loc, q) = s3_and_queue(src, events)?;
        let topic_name = topic_of(fanout)?;
        let s3 = bucket_client(&loc)?;
        let sqs = crate::events::sqs::client().await;
        Ok(S3Wiring {
            loc,
            q,
            topic_name,
            s3,
            sqs,
        })
    }
}

/// An SNS call's failure, named by the `--fanout` topic.
fn fanout_err(fanout: &Option<String>) -> impl Fn(String) -> SlateError + Copy + '_ {
    move |e: String| SlateError::Queue {
        url: fanout.clone().unwrap_or_default(),
        detail: e,
    }
}

async fn setup(a: SetupArgs) -> Result<i32, SlateError> {
    let scheme = Location::parse(&a.src)?.scheme;
    if a.eventbridge && scheme != Scheme::S3 {
        return Err(eventbridge_refused());
    }
    match scheme {
        Scheme::Gcs => return super::events_gcs::setup(&a).await,
        Scheme::Azure => return super::events_azure::setup(&a).await,
        _ => not_for_s3(&a.cloud)?,
    }
    let S3Wiring {
        loc,
        q,
        topic_name,
        s3,
        sqs,
    } = S3Wiring::open(&a.src, &a.events, &a.fanout).await?;
    if a.eventbridge {
        return setup_eventbridge(&a, &loc, &q, &s3, &sqs).await;
    }
    let sns = Sns::new(&s3);
    let sns_err = fanout_err(&a.fanout);
    let region = s3.region().to_string();
    // Everything is read and planned before anything is changed: a configuration whose
    // entries overlap slate's leaves the queue, the topic and the bucket as they were.
    let queue = queue_state(&sqs, &q).await?;
    if queue.is_none() && q.url.is_some() {
        return Err(SlateError::Queue {
            url: q.spec.clone(),
            detail: "no such queue (give sqs://NAME to have it made)".into(),
        });
    }
    let topic = match &topic_name {
        Some(t) => Some(sns.find_topic(t).await.map_err(sns_err)?),
        None => None,
    };
    let mut current = read_notification(&s3, &loc).await?;
    // what is not made yet has no entry: its ARN only names it in the plan
    let planned_queue = queue
        .as_ref()
        .map(|(_, arn, _)| arn.clone())
        .unwrap_or_else(|| format!("arn:aws:sqs:{region}:ACCOUNT:{}", q.name));
    // fanning out, the queue's own entries that the topic's covers go: the queue gets those
    // events through the topic now, and would get each twice. Its entries for other prefixes
    // (another pair's on the same queue) stay.
    let superseded: Vec<wiring::Entry> = if topic_name.is_some() {
        let direct = Target::Queue(planned_queue.clone());
        let mine = wiring::slate_entry(&loc.prefix, direct.clone());
        let (gone, kept) = current
            .entries
            .drain(..)
            .partition(|e: &wiring::Entry| e.target == direct && wiring::covers(&mine, e));
        current.entries = kept;
        gone
    } else {
        Vec::new()
    };
    let planned_target = match (&topic_name, &topic) {
        (Some(_), Some(Some(arn))) => Target::Topic(arn.clone()),
        (Some(t), _) => Target::Topic(format!("arn:aws:sns:{region}:ACCOUNT:{t}")),
        (None, _) => Target::Queue(planned_queue.clone()),
    };
    if let Merge::Conflict(lines) = wiring::merge(
        &current,
        &wiring::slate_entry(&loc.prefix, planned_target.clone()),
    ) {
        for l in &lines {
            eprintln!("slate: bucket {}: {l}", loc.bucket);
        }
        eprintln!(
            "slate: nothing changed: the queue{} and bucket {}'s notification configuration \
             are as they were",
            if topic_name.is_some() {
                ", the topic"
            } else {
                ""
            },
            loc.bucket
        );
        return Ok(1);
    }
    // 1. the queue
    let (url, queue_arn, queue_policy) = match queue {
        Some(s) => s,
        None if a.dry_run => {
            println!("would create SQS queue {}", q.name);
            (String::new(), planned_queue, None)
        }
        None => create_queue(&sqs, &q).await?,
    };
    // 2. with a fan-out: the topic, its policy, the queue's subscription
    let target = match (&topic_name, topic.flatten()) {
        (None, _) => Target::Queue(queue_arn.clone()),
        (Some(_), Some(arn)) => Target::Topic(arn),
        (Some(t), None) if a.dry_run => {
            println!("would create SNS topic {t}");
            planned_target
        }
        (Some(t), None) => {
            let arn = sns.create_topic(t).await.map_err(sns_err)?;
            println!("created SNS topic {t}");
            Target::Topic(arn)
        }
    };
    // 3. the policies: S3 checks that it may send before it takes the entry
    let mut grants = Vec::new();
    if let Target::Topic(topic_arn) = &target {
        let policy = if a.dry_run && topic_arn.contains(":ACCOUNT:") {
            None
        } else {
            sns.policy(topic_arn).await.map_err(sns_err)?
        };
        grants.push((
            wiring::Grant::s3_to_topic(&loc.bucket, topic_arn),
            policy,
            format!("topic {}", crate::events::sns::topic_name(topic_arn)),
        ));
        grants.push((
            wiring::Grant::topic_to_queue(topic_arn, &queue_arn),
            queue_policy.clone(),
            format!("queue {}", q.name),
        ));
    } else {
        grants.push((
            wiring::Grant::s3_to_queue(&loc.bucket, &queue_arn),
            queue_policy.clone(),
            format!("queue {}", q.name),
        ));
    }
    let mut queue_policy = queue_policy;
    for (g, policy, whose) in grants {
        // the queue's policy may have been changed by the grant before
        let policy = if g.what == "queue" {
            queue_policy.clone()
        } else {
            policy
        };
        match wiring::merge_policy(policy.as_deref(), &g) {
            Ok(None) => println!("{whose} already lets {} {}", g.who(), g.action),
            Ok(Some(p)) => {
                if !a.dry_run {
                    if g.what == "queue" {
                        sqs.set_queue_attributes()
                            .queue_url(&url)
                            .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, p.clone())
                            .send()
                            .await
                            .map_err(|e| crate::events::sqs::error(&q.spec, e))?;
                    } else {
                        sns.set_policy(&g.resource, &p).await.map_err(sns_err)?;
                    }
                }
                if g.what == "queue" {
                    queue_policy = Some(p);
                }
                println!(
                    "{} statement {} to the policy of {whose}: {} may {} ({})",
                    if a.dry_run { "would add" } else { "added" },
                    g.sid,
                    g.service,
                    g.action,
                    g.who()
                );
            }
            Err(why) => {
                return Err(SlateError::Queue {
                    url: q.spec.clone(),
                    detail: format!("{whose}: {why}: not changed; allow it or pick another"),
                })
            }
        }
    }
    if let Target::Topic(topic_arn) = &target {
        let subscribed = if a.dry_run && topic_arn.contains(":ACCOUNT:") {
            false
        } else {
            sns.subscriptions(topic_arn)
                .await
                .map_err(sns_err)?
                .iter()
                .any(|s| s.protocol == "sqs" && s.endpoint == queue_arn && s.confirmed)
        };
        if subscribed {
            println!("queue {} is subscribed to the topic", q.name);
        } else {
            if !a.dry_run {
                sns.subscribe_queue(topic_arn, &queue_arn)
                    .await
                    .map_err(sns_err)?;
            }
            println!(
                "{} queue {} to the topic",
                if a.dry_run {
                    "would subscribe"
                } else {
                    "subscribed"
                },
                q.name
            );
        }
    }
    // 4. the bucket's notification configuration, merged
    let want = wiring::slate_entry(&loc.prefix, target.clone());
    let merged = match wiring::merge(&current, &want) {
        // nothing to add, but the queue's direct entries are to go
        Merge::Unchanged if !superseded.is_empty() => Merge::Write(current.clone(), Vec::new()),
        m => m,
    };
    for e in &superseded {
        println!(
            "bucket {}: {} {} (the queue gets its events through the topic now)",
            loc.bucket,
            if a.dry_run { "would remove" } else { "removed" },
            e.describe()
        );
    }
    match merged {
        Merge::Unchanged => {
            println!(
                "bucket {} already sends {} to {} {}: nothing to change",
                loc.bucket,
                want.events.join(", "),
                target.what(),
                target.arn()
            );
        }
        Merge::Write(next, changes) => {
            if !a.dry_run {
                let xml = wiring::render_notification(&next);
                let (status, body) =
                    s3.bucket_call("PUT", "?notification", &xml)
                        .await
                        .map_err(|e| {
                            store_err(&loc, format!("writing its notification configuration: {e}"))
                        })?;
                if !status.is_success() {
                    let text = String::from_utf8_lossy(&body);
                    return Err(store_err(
                        &loc,
                        format!(
                            "writing its notification configuration answered {status} {}",
                            crate::stores::s3copy::error_code(&text).unwrap_or_default()
                        ),
                    ));
                }
            }
            for c in changes {
                println!("bucket {}: {}", loc.bucket, c.line(a.dry_run));
            }
        }
        Merge::Conflict(lines) => {
            // read a moment ago without one: someone changed the configuration meanwhile
            for l in &lines {
                eprintln!("slate: bucket {}: {l}", loc.bucket);
            }
            return Ok(1);
        }
    }
    // the notification entry was written, or the fan-out made: something changed
    Ok(setup_done(&a, true))
}

/// Setup's last line: what a dry run did, what to run next, or that nothing changed. The
/// exit code.
pub(super) fn setup_done(a: &SetupArgs, changed: bool) -> i32 {
    if a.dry_run {
        println!("dry run: nothing changed");
    } else if changed {
        println!(
            "wired: follow it with `slate sync {} DST --events {}`",
            a.src, a.events
        );
    } else {
        println!("nothing changed: every part was there");
    }
    0
}

async fn check(a: CheckArgs) -> Result<i32, SlateError> {
    let scheme = Location::parse(&a.src)?.scheme;
    if a.eventbridge && scheme != Scheme::S3 {
        return Err(eventbridge_refused());
    }
    match scheme {
        Scheme::Gcs => return super::events_gcs::check(&a).await,
        Scheme::Azure => return super::events_azure::check(&a).await,
        _ => not_for_s3(&a.cloud)?,
    }
    let S3Wiring {
        loc,
        q,
        topic_name,
        s3,
        sqs,
    } = S3Wiring::open(&a.src, &a.events, &a.fanout).await?;
    let sns = Sns::new(&s3);
    let sns_err = fanout_err(&a.fanout);
    let Some((_, queue_arn, policy)) = queue_state(&sqs, &q).await? else {
        println!("broken: there is no SQS queue {}", q.name);
        return Ok(1);
    };
    if a.eventbridge {
        return check_eventbridge(&a, &loc, &q, &s3, &queue_arn, policy.as_deref()).await;
    }
    let mut findings = Vec::new();
    let broken = |line: String| wiring::Finding { broken: true, line };
    let warning = |line: String| wiring::Finding {
        broken: false,
        line,
    };
    let target = match &topic_name {
        None => {
            let g = wiring::Grant::s3_to_queue(&loc.bucket, &queue_arn);
            if let Some(why) = wiring::policy_refuses(policy.as_deref(), &g) {
                findings.push(broken(why));
            }
            if let Some(why) = wiring::policy_doubts(policy.as_deref(), &g) {
                findings.push(warning(why));
            }
            Target::Queue(queue_arn.clone())
        }
        Some(t) => {
            let Some(topic_arn) = sns.find_topic(t).await.map_err(sns_err)? else {
                println!("broken: there is no SNS topic {t}");
                return Ok(1);
            };
            let topic_policy = sns.policy(&topic_arn).await.map_err(sns_err)?;
            let grants = [
                (
                    topic_policy.as_deref(),
                    wiring::Grant::s3_to_topic(&loc.bucket, &topic_arn),
                ),
                (
                    policy.as_deref(),
                    wiring::Grant::topic_to_queue(&topic_arn, &queue_arn),
                ),
            ];
            for (p, g) in &grants {
                if let Some(why) = wiring::policy_refuses(*p, g) {
                    findings.push(broken(why));
                }
                if let Some(why) = wiring::policy_doubts(*p, g) {
                    findings.push(warning(why));
                }
            }
            if !sns
                .subscriptions(&topic_arn)
                .await
                .map_err(sns_err)?
                .iter()
                .any(|s| s.protocol == "sqs" && s.endpoint == queue_arn && s.confirmed)
            {
                findings.push(broken(format!(
                    "queue {} is not subscribed to topic {t}",
                    q.name
                )));
            }
            Target::Topic(topic_arn)
        }
    };
    let n = read_notification(&s3, &loc).await?;
    findings.extend(wiring::check_notification(&n, &loc.prefix, &target));
    for f in &findings {
        println!(
            "{}: {}",
            if f.broken { "broken" } else { "warning" },
            f.line
        );
    }
    let fanout = a
        .fanout
        .as_deref()
        .map(|f| format!(" --fanout {f}"))
        .unwrap_or_default();
    if findings.iter().any(|f| f.broken) {
        println!(
            "events of {} cannot reach queue {}: `slate events setup {} --events {}{fanout}` \
             repairs it",
            a.src, q.name, a.src, a.events
        );
        return Ok(1);
    }
    println!(
        "ok: bucket {} sends {} to {} {}{}; every policy on the way lets them through",
        loc.bucket,
        wiring::S3_EVENTS.join(", "),
        target.what(),
        target.arn(),
        if topic_name.is_some() {
            format!(", to which queue {} is subscribed", q.name)
        } else {
            String::new()
        }
    );
    Ok(0)
}

fn eventbridge_refused() -> SlateError {
    SlateError::BadOption {
        option: "--eventbridge".into(),
        why: "routes an S3 bucket's events; a GCS source's go through Pub/Sub, an Azure \
              source's through Event Grid"
            .into(),
    }
}

/// An EventBridge call's failure.
fn eb_err(e: String) -> SlateError {
    SlateError::Queue {
        url: "EventBridge".into(),
        detail: e,
    }
}

/// Setup of the EventBridge route: the queue, slate's rule and its target, the queue's
/// policy statement for the rule, and EventBridge delivery on the bucket. Everything is read
/// before anything is written.
async fn setup_eventbridge(
    a: &SetupArgs,
    loc: &Location,
    q: &QueueRef,
    s3: &crate::stores::s3copy::S3CrossBucket,
    sqs: &aws_sdk_sqs::Client,
) -> Result<i32, SlateError> {
    use crate::events::eventbridge::{self as eb, EventBridge};
    let bus = EventBridge::new(s3);
    let region = s3.region().to_string();
    let verb = |done: &'static str, planned: &'static str| if a.dry_run { planned } else { done };
    let queue = queue_state(sqs, q).await?;
    if queue.is_none() && q.url.is_some() {
        return Err(SlateError::Queue {
            url: q.spec.clone(),
            detail: "no such queue (give sqs://NAME to have it made)".into(),
        });
    }
    let name = eb::rule_name(&loc.bucket, &q.name);
    let rule = bus.rule(&name).await.map_err(eb_err)?;
    let mut current = read_notification(s3, loc).await?;
    // 1. the queue
    let (url, queue_arn, mut queue_policy) = match queue {
        Some(s) => s,
        None if a.dry_run => {
            println!("would create SQS queue {}", q.name);
            (
                String::new(),
                format!("arn:aws:sqs:{region}:ACCOUNT:{}", q.name),
                None,
            )
        }
        None => create_queue(sqs, q).await?,
    };
    let mut changed = false;
    // 2. the rule, its pattern merged with what it admitted before
    let pattern = eb::pattern(
        &loc.bucket,
        &loc.prefix,
        rule.as_ref().and_then(|r| r.pattern.as_deref()),
    );
    let rule_arn = match &rule {
        Some(r)
            if r.enabled
                && r.pattern.as_deref().is_some_and(|p| {
                    eb::pattern_problems(p, &loc.bucket, &loc.prefix).is_empty()
                }) =>
        {
            println!("EventBridge rule {name} is there");
            r.arn.clone()
        }
        _ => {
            let arn = if a.dry_run {
                rule.as_ref()
                    .map(|r| r.arn.clone())
                    .unwrap_or_else(|| format!("arn:aws:events:{region}:ACCOUNT:rule/{name}"))
            } else {
                bus.put_rule(&name, &pattern).await.map_err(eb_err)?
            };
            changed = true;
            println!(
                "{} EventBridge rule {name}: {pattern}",
                match rule {
                    None => verb("created", "would create"),
                    Some(_) => verb("updated", "would update"),
                }
            );
            arn
        }
    };
    // 3. its target
    let targets = if rule.is_some() {
        bus.targets(&name).await.map_err(eb_err)?
    } else {
        Vec::new()
    };
    if targets.contains(&queue_arn) {
        println!("rule {name} sends to queue {}", q.name);
    } else {
        if !a.dry_run {
            bus.put_target(&name, &queue_arn).await.map_err(eb_err)?;
        }
        changed = true;
        println!(
            "{} queue {} as the target of rule {name}",
            verb("added", "would add"),
            q.name
        );
    }
    // 4. the queue's policy lets the rule send
    let g = wiring::Grant::rule_to_queue(&rule_arn, &queue_arn);
    match wiring::merge_policy(queue_policy.as_deref(), &g) {
        Ok(None) => println!("queue {} already lets {} {}", q.name, g.who(), g.action),
        Ok(Some(p)) => {
            if !a.dry_run {
                sqs.set_queue_attributes()
                    .queue_url(&url)
                    .attributes(aws_sdk_sqs::types::QueueAttributeName::Policy, p.clone())
                    .send()
                    .await
                    .map_err(|e| crate::events::sqs::error(&q.spec, e))?;
            }
            queue_policy = Some(p);
            changed = true;
            println!(
                "{} statement {} to the policy of queue {}: {} may {} ({})",
                verb("added", "would add"),
                g.sid,
                q.name,
                g.service,
                g.action,
                g.who()
            );
        }
        Err(why) => {
            return Err(SlateError::Queue {
                url: q.spec.clone(),
                detail: format!(
                    "queue {}: {why}: not changed; allow it or pick another",
                    q.name
                ),
            })
        }
    }
    let _ = queue_policy;
    // 5. the bucket sends to EventBridge; the queue's own entries for these keys go (it
    // would get each event twice)
    let direct = Target::Queue(queue_arn.clone());
    let mine = wiring::slate_entry(&loc.prefix, direct.clone());
    let (gone, kept): (Vec<wiring::Entry>, Vec<wiring::Entry>) = current
        .entries
        .drain(..)
        .partition(|e| e.target == direct && wiring::covers(&mine, e));
    current.entries = kept;
    if current.event_bridge && gone.is_empty() {
        println!("bucket {} sends its events to EventBridge", loc.bucket);
    } else {
        let was_on = current.event_bridge;
        current.event_bridge = true;
        if !a.dry_run {
            let xml = wiring::render_notification(&current);
            let (status, body) =
                s3.bucket_call("PUT", "?notification", &xml)
                    .await
                    .map_err(|e| {
                        store_err(loc, format!("writing its notification configuration: {e}"))
                    })?;
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body);
                return Err(store_err(
                    loc,
                    format!(
                        "writing its notification configuration answered {status} {}",
                        crate::stores::s3copy::error_code(&text).unwrap_or_default()
                    ),
                ));
            }
        }
        changed = true;
        for e in &gone {
            println!(
                "bucket {}: {} {} (the queue gets its events through EventBridge now)",
                loc.bucket,
                verb("removed", "would remove"),
                e.describe()
            );
        }
        if !was_on {
            println!(
                "bucket {}: {} delivery to EventBridge (every other entry kept)",
                loc.bucket,
                verb("turned on", "would turn on")
            );
        }
    }
    Ok(setup_done(a, changed))
}

/// Check of the EventBridge route (see [`setup_eventbridge`]).
async fn check_eventbridge(
    a: &CheckArgs,
    loc: &Location,
    q: &QueueRef,
    s3: &crate::stores::s3copy::S3CrossBucket,
    queue_arn: &str,
    policy: Option<&str>,
) -> Result<i32, SlateError> {
    use crate::events::eventbridge::{self as eb, EventBridge};
    let bus = EventBridge::new(s3);
    let name = eb::rule_name(&loc.bucket, &q.name);
    let mut findings = Vec::new();
    let broken = |line: String| wiring::Finding { broken: true, line };
    match bus.rule(&name).await.map_err(eb_err)? {
        None => findings.push(broken(format!("there is no EventBridge rule {name}"))),
        Some(r) => {
            if !r.enabled {
                findings.push(broken(format!("EventBridge rule {name} is disabled")));
            }
            for p in eb::pattern_problems(
                r.pattern.as_deref().unwrap_or("{}"),
                &loc.bucket,
                &loc.prefix,
            ) {
                findings.push(broken(format!("rule {name}: {p}")));
            }
            if !bus
                .targets(&name)
                .await
                .map_err(eb_err)?
                .iter()
                .any(|t| t == queue_arn)
            {
                findings.push(broken(format!(
                    "rule {name} does not send to queue {}",
                    q.name
                )));
            }
            let g = wiring::Grant::rule_to_queue(&r.arn, queue_arn);
            if let Some(why) = wiring::policy_refuses(policy, &g) {
                findings.push(broken(why));
            }
            if let Some(why) = wiring::policy_doubts(policy, &g) {
                findings.push(wiring::Finding {
                    broken: false,
                    line: why,
                });
            }
        }
    }
    let n = read_notification(s3, loc).await?;
    if !n.event_bridge {
        findings.push(broken(format!(
            "bucket {} does not send its events to EventBridge",
            loc.bucket
        )));
    }
    for f in &findings {
        println!(
            "{}: {}",
            if f.broken { "broken" } else { "warning" },
            f.line
        );
    }
    if findings.iter().any(|f| f.broken) {
        println!(
            "events of {} cannot reach queue {}: `slate events setup {} --events {} --eventbridge` \
             repairs it",
            a.src, q.name, a.src, a.events
        );
        return Ok(1);
    }
    println!(
        "ok: bucket {} sends its events to EventBridge, whose rule {name} sends {} under '{}' to queue {}; the queue's policy lets the rule in",
        loc.bucket,
        eb::DETAIL_TYPES.join(", "),
        loc.prefix,
        q.name
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_specs_are_read_or_refused() {
        let q = QueueRef::parse("sqs://slate-q").unwrap();
        assert_eq!((q.name.as_str(), q.url.is_none()), ("slate-q", true));
        let q = QueueRef::parse("sqs://http://127.0.0.1:5000/123456789012/my_q").unwrap();
        assert_eq!(q.name, "my_q");
        assert_eq!(
            q.url.as_deref(),
            Some("http://127.0.0.1:5000/123456789012/my_q")
        );
        for bad in ["sqs://", "sqs://a b", "sqs://q?x"] {
            assert!(QueueRef::parse(bad).is_err(), "{bad}");
        }
    }
}
