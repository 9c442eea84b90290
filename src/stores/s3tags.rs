//! S3 object tags. object_store writes tags (`x-amz-tagging`) but neither reads them nor says
//! whether an object has any; S3 says so in every GET and HEAD (`x-amz-tagging-count`). The S3
//! client's HTTP service here puts that count into the response's extensions, where a
//! `GetResult` hands it on ([`tag_count`]); only objects that have tags cost a `?tagging` read.

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::{ClientOptions, GetResult};

/// How many tags S3 says an object has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagCount(pub u32);

/// The tag count of the object a GET or HEAD answered about (0: none, or not S3).
pub fn tag_count(res: &GetResult) -> u32 {
    res.extensions.get::<TagCount>().map(|t| t.0).unwrap_or(0)
}

/// reqwest, with `x-amz-tagging-count` kept in each response's extensions.
#[derive(Debug, Default)]
pub struct TagCountingConnector;

impl HttpConnector for TagCountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(TagCounting(inner)))
    }
}

#[derive(Debug)]
struct TagCounting(HttpClient);

#[async_trait::async_trait]
impl HttpService for TagCounting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let mut resp = self.0.execute(req).await?;
        let n = resp
            .headers()
            .get("x-amz-tagging-count")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        if let Some(n) = n {
            resp.extensions_mut().insert(TagCount(n));
        }
        Ok(resp)
    }
}

/// The tags of a `GetObjectTagging` answer, in order; values unescaped.
pub fn parse_tagging(xml: &str) -> Result<Vec<(String, String)>, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Tagging {
        tag_set: Option<TagSet>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "PascalCase")]
    struct TagSet {
        #[serde(default)]
        tag: Vec<Tag>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Tag {
        key: Option<String>,
        // an empty value is written <Value></Value> or <Value/>
        #[serde(default)]
        value: Option<String>,
    }
    let t: Tagging = quick_xml::de::from_str(xml).map_err(|e| format!("tagging: {e}"))?;
    t.tag_set
        .unwrap_or_default()
        .tag
        .into_iter()
        .map(|t| {
            let k = t.key.ok_or("a <Tag> without <Key>")?;
            Ok((k, t.value.unwrap_or_default()))
        })
        .collect()
}

/// The reader of `loc`'s tags: an S3 source reached path style with credentials (anonymous
/// access cannot read tags; a virtual-hosted endpoint has no such client: its tags are not
/// carried). One rule for the copier and the compare, so that both read the same tags.
pub fn tag_reader(
    loc: &crate::core::location::Location,
) -> crate::core::error::Result<Option<std::sync::Arc<crate::stores::s3copy::S3CrossBucket>>> {
    if loc.scheme != crate::core::location::Scheme::S3
        || crate::stores::s3_settings(loc).is_ok_and(|st| st.anonymous)
    {
        return Ok(None);
    }
    Ok(crate::stores::s3copy::S3CrossBucket::for_bucket(loc)?.map(std::sync::Arc::new))
}

/// `k=v&k2=v2`, percent-encoded (a space is `%20`): the form of `x-amz-tagging` and Azure's
/// `x-ms-tags`. slate sends every tag header itself in this one form.
pub fn encode_tags<'a>(tags: impl IntoIterator<Item = (&'a String, &'a String)>) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    // everything but unreserved characters, as object_store's TagSet encodes them
    const SET: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    tags.into_iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                utf8_percent_encode(k, SET),
                utf8_percent_encode(v, SET)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_get_object_tagging_answers() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet>
<Tag><Key>team</Key><Value>a &amp; b</Value></Tag><Tag><Key>empty</Key><Value></Value></Tag>
<Tag><Key>k2</Key><Value/></Tag></TagSet></Tagging>"#;
        assert_eq!(
            parse_tagging(xml).unwrap(),
            vec![
                ("team".to_string(), "a & b".to_string()),
                ("empty".to_string(), String::new()),
                ("k2".to_string(), String::new()),
            ]
        );
        assert_eq!(
            parse_tagging("<Tagging><TagSet></TagSet></Tagging>").unwrap(),
            vec![]
        );
        assert!(
            parse_tagging("<Tagging><TagSet><Tag><Value>x</Value></Tag></TagSet></Tagging>")
                .is_err()
        );
        assert!(parse_tagging(
            "<Tagging><TagSet><Tag><Key>a</Key><Value>&bogus;</Value></Tag></TagSet></Tagging>"
        )
        .is_err());
        let tags = [("a b".to_string(), "x&y".to_string())];
        assert_eq!(encode_tags(tags.iter().map(|(k, v)| (k, v))), "a%20b=x%26y");
    }
}
