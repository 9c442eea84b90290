//! Server-side copy between two buckets of one S3 endpoint (CopyObject with
//! `x-amz-copy-source`). object_store copies only within one bucket; across buckets it would
//! move every byte through slate. One signed request per object instead of a GET and a PUT:
//! no egress through the client, a third of rclone's requests for small objects.

use http::Request;
use object_store::aws::{AmazonS3, AwsAuthorizer};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody};
use object_store::{Attribute, Attributes};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::retry::ChunkError;
use super::retry::Retry;
use crate::core::error::{Result, SlateError};
use crate::core::location::{Location, Scheme};
use crate::core::meta::Placement;
use crate::stores::{http_options, s3_settings};

/// Largest object one CopyObject may copy; larger ones go through the data path.
pub const MAX_COPY_OBJECT: u64 = 5 << 30;

/// What S3 signs and expects in a path: everything but unreserved characters and `/` encoded.
const PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// What a form body encodes: everything but unreserved characters.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

pub fn encode_key(key: &str) -> String {
    utf8_percent_encode(key, PATH).to_string()
}

/// What [`S3CrossBucket::replace_metadata`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replaced {
    /// Replaced; the object's ETag after it.
    Done(Option<String>),
    /// The object is in GLACIER or DEEP_ARCHIVE: not copied onto itself (S3 refuses before a
    /// restore); the caller writes it again instead.
    Archived,
}

/// Copies objects from one bucket into another on the same S3 endpoint.
#[derive(Debug)]
pub struct S3CrossBucket {
    s3: AmazonS3,
    http: HttpClient,
    region: String,
    /// URL of the destination bucket (path style), without trailing `/`.
    dst_bucket_url: String,
    src_bucket: String,
    /// Sent with every copy: the storage class and canned ACL asked for (CopyObject keeps
    /// the source's metadata and Content-* headers, but not its ACL or class).
    extra: Vec<(&'static str, String)>,
}

impl S3CrossBucket {
    /// Returns a copier when `src` and `dst` are two buckets of one S3 endpoint reached path
    /// style (virtual-hosted endpoints fall back to the data path).
    pub fn for_pair(src: &Location, dst: &Location) -> Result<Option<S3CrossBucket>> {
        if src.bucket == dst.bucket {
            return Ok(None);
        }
        Self::with_placement(src, dst, &Placement::default())
    }

    /// A copier for `src` → `dst` (two buckets, or one) on one S3 endpoint that sets
    /// `placement` (checked for S3) on every copy.
    pub fn with_placement(
        src: &Location,
        dst: &Location,
        placement: &Placement,
    ) -> Result<Option<S3CrossBucket>> {
        if src.scheme != Scheme::S3 || dst.scheme != Scheme::S3 || !src.same_endpoint(dst) {
            // two endpoints, or two sets of credentials: CopyObject cannot reach across
            return Ok(None);
        }
        let mut extra = Vec::new();
        if let Some(c) = &placement.storage_class {
            extra.push(("x-amz-storage-class", c.clone()));
        }
        if let Some(a) = &placement.acl {
            extra.push(("x-amz-acl", a.clone()));
        }
        let st = s3_settings(dst)?;
        if st.virtual_hosted {
            return Ok(None);
        }
        extra.extend(st.sse.iter().cloned());
        if st.requester_pays {
            extra.push(("x-amz-request-payer", "requester".into()));
        }
        let base = st
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", st.region));
        let s3 = st.builder.build().map_err(|e| SlateError::Store {
            url: dst.to_string(),
            detail: e.to_string(),
        })?;
        let http =
            crate::stores::requests::CountingConnector::new(crate::core::location::Scheme::S3)
                .connect(&http_options(st.allow_http))
                .map_err(|e| SlateError::Store {
                    url: dst.to_string(),
                    detail: e.to_string(),
                })?;
        Ok(Some(S3CrossBucket {
            s3,
            http,
            region: st.region,
            dst_bucket_url: format!("{base}/{}", dst.bucket),
            src_bucket: src.bucket.clone(),
            extra,
        }))
    }

    /// Copies `src_key` of the source bucket to `dst_key` of the destination bucket.
    pub async fn copy(
        &self,
        src_key: &str,
        dst_key: &str,
    ) -> std::result::Result<Option<String>, String> {
        Retry::default()
            .for_store("s3")
            .run(
                dst_key,
                |e| matches!(e, ChunkError::Retry(_)),
                |_| self.try_copy(src_key, dst_key, &[]),
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// Replaces the properties, user metadata (and with `attrs` naming one, the storage
    /// class) of `key` in the destination bucket without moving its bytes: a CopyObject of the
    /// object onto itself with `x-amz-metadata-directive: REPLACE` (objects up to 5 GiB). Without
    /// a class in `attrs` or the placement, the object's own class is kept (read with a HEAD:
    /// a copy without one would make it STANDARD).
    pub async fn replace_metadata(
        &self,
        key: &str,
        attrs: &Attributes,
        tags: Option<&std::collections::BTreeMap<String, String>>,
    ) -> std::result::Result<Replaced, String> {
        let mut headers: Vec<(String, String)> =
            vec![("x-amz-metadata-directive".into(), "REPLACE".into())];
        let (current, dst_tags) = self.class_and_tags_of(key).await?;
        if let Some(tags) = tags.filter(|t| !t.is_empty() || dst_tags > 0) {
            // the tags too: the source's now (none clears the replica's); without (or with
            // none on either side), the copy leaves them as they are
            headers.push(("x-amz-tagging-directive".into(), "REPLACE".into()));
            if !tags.is_empty() {
                headers.push((
                    "x-amz-tagging".into(),
                    crate::stores::s3tags::encode_tags(tags),
                ));
            }
        }
        for (k, v) in attrs.iter() {
            let name = match k {
                Attribute::ContentType => "content-type".to_string(),
                Attribute::ContentEncoding => "content-encoding".into(),
                Attribute::ContentLanguage => "content-language".into(),
                Attribute::ContentDisposition => "content-disposition".into(),
                Attribute::CacheControl => "cache-control".into(),
                Attribute::StorageClass => "x-amz-storage-class".into(),
                Attribute::Metadata(n) => format!("x-amz-meta-{n}"),
                _ => continue,
            };
            // the placement's headers go with every copy already (a header twice is joined
            // into one value by the signer, which S3 refuses)
            if self.extra.iter().any(|(k, _)| *k == name) {
                continue;
            }
            headers.push((name, v.to_string()));
        }
        let has_class = headers.iter().any(|(k, _)| k == "x-amz-storage-class")
            || self.extra.iter().any(|(k, _)| *k == "x-amz-storage-class");
        if matches!(current.as_deref(), Some("GLACIER" | "DEEP_ARCHIVE")) {
            // an archived object cannot be copied onto itself before it is restored
            return Ok(Replaced::Archived);
        }
        if !has_class {
            if let Some(class) = current {
                headers.push(("x-amz-storage-class".into(), class));
            }
        }
        Retry::default()
            .for_store("s3")
            .run(
                key,
                |e| matches!(e, ChunkError::Retry(_)),
                |_| self.try_copy(key, key, &headers),
            )
            .await
            .map(Replaced::Done)
            .map_err(|e| e.to_string())
    }

    /// A client for one bucket (source and destination alike): its tags, its own objects.
    pub fn for_bucket(loc: &Location) -> Result<Option<S3CrossBucket>> {
        Self::with_placement(loc, loc, &Placement::default())
    }

    /// The tags of `key` in this client's bucket (GetObjectTagging). A store that refuses the
    /// call (403: no `s3:GetObjectTagging`; 405/501: an S3-compatible without it) gives no
    /// tags, said once in the log: the copies go on as before tags were read, and every path
    /// reads the same (none), so nothing is updated back and forth.
    pub async fn get_tagging(
        &self,
        key: &str,
    ) -> std::result::Result<Vec<(String, String)>, String> {
        self.with_retry(key, || async {
            let (status, _, body) = self.signed("GET", key, "?tagging", &[]).await?;
            if matches!(status.as_u16(), 403 | 405 | 501) {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::warn!(
                        "object tags are not carried: the source answered {status} to reading \
                         them (GetObjectTagging)"
                    )
                });
                return Ok(Vec::new());
            }
            if !status.is_success() {
                return Err(ChunkError::of_status(status, "reading tags"));
            }
            crate::stores::s3tags::parse_tagging(&String::from_utf8_lossy(&body))
                .map_err(ChunkError::Fatal)
        })
        .await
    }

    /// The storage class of `key` in the destination bucket (None: STANDARD, which S3 does
    /// not name in a HEAD) and how many tags it has.
    async fn class_and_tags_of(
        &self,
        key: &str,
    ) -> std::result::Result<(Option<String>, u32), String> {
        self.with_retry(key, || async {
            let (status, headers, _) = self.signed("HEAD", key, "", &[]).await?;
            if !status.is_success() {
                return Err(ChunkError::of_status(status, "HEAD"));
            }
            let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
            let tags = h("x-amz-tagging-count")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Ok((h("x-amz-storage-class").map(str::to_string), tags))
        })
        .await
    }

    /// The parts the store holds of multipart upload `upload_id` of `key` in this client's
    /// bucket (ListParts, every page): part number → ETag. None when the store no longer has
    /// the upload (`NoSuchUpload`: completed, aborted or expired).
    pub async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> std::result::Result<Option<std::collections::HashMap<u32, String>>, String> {
        let id = utf8_percent_encode(upload_id, NON_ALPHANUMERIC).to_string();
        let mut parts = std::collections::HashMap::new();
        let mut marker: Option<String> = None;
        loop {
            let query = match &marker {
                Some(m) => format!("?part-number-marker={m}&uploadId={id}"),
                None => format!("?uploadId={id}"),
            };
            let page = self
                .with_retry(key, || async {
                    let (status, _, body) = self.signed("GET", key, &query, &[]).await?;
                    let text = String::from_utf8_lossy(&body).to_string();
                    if status.as_u16() == 404 {
                        return Ok(None);
                    }
                    if !status.is_success() {
                        return Err(ChunkError::of_status(status, "listing parts"));
                    }
                    Ok(Some(text))
                })
                .await?;
            let Some(text) = page else {
                return Ok(None);
            };
            let page = parse_parts(&text)?;
            parts.extend(page.parts);
            match page.next {
                Some(n) if page.truncated => marker = Some(n),
                _ => return Ok(Some(parts)),
            }
        }
    }

    /// `attempt` on the one retry budget, its error as text.
    async fn with_retry<T, F, Fut>(&self, key: &str, attempt: F) -> std::result::Result<T, String>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ChunkError>>,
    {
        super::retry::signed_call("s3", key, attempt).await
    }

    /// One signed request on the bucket itself (`query` with its `?`, e.g. `?notification`)
    /// with `body`, retried on the one budget: the status and the body of the answer.
    pub async fn bucket_call(
        &self,
        method: &str,
        query: &str,
        body: &str,
    ) -> std::result::Result<(http::StatusCode, bytes::Bytes), String> {
        self.with_retry(query, || async {
            let (status, _, answer) = self
                .signed_with(method, "", query, &[], body.as_bytes().to_vec())
                .await?;
            if status.is_server_error() || status.as_u16() == 429 {
                return Err(ChunkError::of_status(status, query));
            }
            Ok((status, answer))
        })
        .await
    }

    /// One call of another AWS service's query API (SNS) with this bucket's credentials and
    /// region: a signed form POST to `endpoint`; the status and the body of the answer.
    pub async fn aws_query(
        &self,
        service: &'static str,
        endpoint: &str,
        form: &[(&str, &str)],
    ) -> std::result::Result<(http::StatusCode, bytes::Bytes), String> {
        let body = form
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    utf8_percent_encode(k, FORM),
                    utf8_percent_encode(v, FORM)
                )
            })
            .collect::<Vec<_>>()
            .join("&");
        let what = form
            .iter()
            .find(|(k, _)| *k == "Action")
            .map(|(_, v)| *v)
            .unwrap_or(service);
        super::retry::signed_call(service, what, || async {
            let req: Request<HttpRequestBody> = Request::builder()
                .method("POST")
                .uri(endpoint)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(HttpRequestBody::from(body.clone().into_bytes()))
                .map_err(|e| ChunkError::Fatal(e.to_string()))?;
            let (status, _, answer) = self.send(service, req).await?;
            if status.is_server_error() || status.as_u16() == 429 {
                return Err(ChunkError::of_status(status, what));
            }
            Ok((status, answer))
        })
        .await
    }

    /// One call of another AWS service's JSON 1.1 API (EventBridge) with this bucket's
    /// credentials and region: a signed POST of `body` to `endpoint` with `X-Amz-Target:
    /// target`; the status and the body of the answer.
    pub async fn aws_json(
        &self,
        service: &'static str,
        endpoint: &str,
        target: &str,
        body: &serde_json::Value,
    ) -> std::result::Result<(http::StatusCode, bytes::Bytes), String> {
        let body = body.to_string();
        let what = target.rsplit('.').next().unwrap_or(target);
        super::retry::signed_call(service, what, || async {
            let req: Request<HttpRequestBody> = Request::builder()
                .method("POST")
                .uri(endpoint)
                .header("content-type", "application/x-amz-json-1.1")
                .header("x-amz-target", target)
                .body(HttpRequestBody::from(body.clone().into_bytes()))
                .map_err(|e| ChunkError::Fatal(e.to_string()))?;
            let (status, _, answer) = self.send(service, req).await?;
            if status.is_server_error() || status.as_u16() == 429 {
                return Err(ChunkError::of_status(status, what));
            }
            Ok((status, answer))
        })
        .await
    }

    /// The region the bucket's requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// One signed request with no body for `key` of the destination bucket (`query` with its
    /// `?`): the status, the headers and the body of the answer.
    async fn signed(
        &self,
        method: &str,
        key: &str,
        query: &str,
        headers: &[(String, String)],
    ) -> std::result::Result<(http::StatusCode, http::HeaderMap, bytes::Bytes), ChunkError> {
        self.signed_with(method, key, query, headers, Vec::new())
            .await
    }

    async fn signed_with(
        &self,
        method: &str,
        key: &str,
        query: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> std::result::Result<(http::StatusCode, http::HeaderMap, bytes::Bytes), ChunkError> {
        let url = format!("{}/{}{query}", self.dst_bucket_url, encode_key(key));
        let mut b = Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let req: Request<HttpRequestBody> = b
            .body(HttpRequestBody::from(body))
            .map_err(|e| ChunkError::Fatal(e.to_string()))?;
        self.send("s3", req).await
    }

    /// Signs `req` for `service` with the bucket's credentials and region, sends it: the
    /// status, the headers and the body of the answer.
    async fn send(
        &self,
        service: &str,
        mut req: Request<HttpRequestBody>,
    ) -> std::result::Result<(http::StatusCode, http::HeaderMap, bytes::Bytes), ChunkError> {
        let cred = self
            .s3
            .credentials()
            .get_credential()
            .await
            .map_err(|e| ChunkError::Retry(format!("credentials: {e}")))?;
        AwsAuthorizer::new(&cred, service, &self.region)
            .try_authorize(&mut req, None)
            .map_err(|e| ChunkError::Fatal(e.to_string()))?;
        let resp = self
            .http
            .execute(req)
            .await
            .map_err(|e| ChunkError::Retry(e.to_string()))?;
        let (status, hdrs) = (resp.status(), resp.headers().clone());
        let body = resp
            .into_body()
            .bytes()
            .await
            .map_err(|e| ChunkError::Retry(e.to_string()))?;
        Ok((status, hdrs, body))
    }

    /// One attempt; the error says whether another attempt may help.
    async fn try_copy(
        &self,
        src_key: &str,
        dst_key: &str,
        headers: &[(String, String)],
    ) -> std::result::Result<Option<String>, ChunkError> {
        let mut all = vec![(
            "x-amz-copy-source".to_string(),
            format!("/{}/{}", self.src_bucket, encode_key(src_key)),
        )];
        all.extend(self.extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        all.extend(headers.iter().cloned());
        let (status, _, body) = self.signed("PUT", dst_key, "", &all).await?;
        let text = String::from_utf8_lossy(&body);
        // S3 may answer 200 and still report an error in the body of a copy.
        let code = error_code(&text);
        if status.is_success() && code.is_none() {
            // CopyObjectResult carries the new object's ETag
            #[derive(serde::Deserialize)]
            struct CopyObjectResult {
                #[serde(rename = "ETag")]
                etag: Option<String>,
            }
            let etag = quick_xml::de::from_str::<CopyObjectResult>(&text)
                .ok()
                .and_then(|r| r.etag);
            return Ok(etag);
        }
        let code = code.unwrap_or_default();
        let retry = status.is_server_error()
            || status.as_u16() == 429
            || code == "InternalError"
            || code == "SlowDown";
        let msg = format!("server-side copy answered {status} {code}");
        Err(if retry {
            ChunkError::Retry(msg)
        } else {
            ChunkError::Fatal(msg)
        })
    }
}

/// The `<Code>` of an `<Error>` answer (S3 may answer 200 and still report an error in the
/// body of a copy); None when the body is no error.
pub fn error_code(xml: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename = "Error")]
    struct ErrorAnswer {
        #[serde(rename = "Code")]
        code: Option<String>,
    }
    #[derive(serde::Deserialize)]
    enum Root {
        Error(ErrorAnswer),
        #[serde(other)]
        Other,
    }
    match quick_xml::de::from_str::<Root>(xml).ok()? {
        Root::Error(e) => Some(e.code.unwrap_or_default()),
        Root::Other => None,
    }
}

/// One page of a ListParts answer.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PartsPage {
    pub parts: Vec<(u32, String)>,
    pub truncated: bool,
    pub next: Option<String>,
}

/// Reads a ListParts answer: each `<Part>`'s number and ETag (as S3 writes it, quoted), and
/// whether more pages follow.
pub fn parse_parts(xml: &str) -> std::result::Result<PartsPage, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct ListPartsResult {
        #[serde(default)]
        part: Vec<Part>,
        is_truncated: Option<String>,
        next_part_number_marker: Option<String>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Part {
        part_number: Option<String>,
        #[serde(rename = "ETag")]
        etag: Option<String>,
    }
    let r: ListPartsResult =
        quick_xml::de::from_str(xml).map_err(|e| format!("listing parts: {e}"))?;
    let mut page = PartsPage {
        truncated: r.is_truncated.as_deref().map(str::trim) == Some("true"),
        next: r.next_part_number_marker.map(|s| s.trim().to_string()),
        ..Default::default()
    };
    for p in r.part {
        let n = p
            .part_number
            .and_then(|n| n.trim().parse::<u32>().ok())
            .ok_or("listing parts: a part without a number")?;
        let etag = p
            .etag
            .ok_or_else(|| format!("listing parts: part {n} without an ETag"))?;
        page.parts.push((n, etag));
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_parts_answers_are_read() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListPartsResult><Bucket>b</Bucket><Key>k</Key><UploadId>u</UploadId>
<PartNumberMarker>0</PartNumberMarker><NextPartNumberMarker>2</NextPartNumberMarker>
<MaxParts>2</MaxParts><IsTruncated>true</IsTruncated>
<Part><PartNumber>1</PartNumber><LastModified>x</LastModified><ETag>&quot;aa&quot;</ETag><Size>5</Size></Part>
<Part><PartNumber>2</PartNumber><ETag>"bb"</ETag><Size>5</Size></Part>
</ListPartsResult>"#;
        let p = super::parse_parts(xml).unwrap();
        assert_eq!(
            p.parts,
            vec![(1, "\"aa\"".to_string()), (2, "\"bb\"".to_string())]
        );
        assert!(p.truncated);
        assert_eq!(p.next.as_deref(), Some("2"));
        let last = super::parse_parts(
            "<ListPartsResult><IsTruncated>false</IsTruncated></ListPartsResult>",
        )
        .unwrap();
        assert_eq!(last, super::PartsPage::default());
        assert!(super::parse_parts(
            "<ListPartsResult><Part><ETag>x</ETag></Part></ListPartsResult>"
        )
        .is_err());
        assert!(super::parse_parts("<ListPartsResult><Part>").is_err());
        // an error in a 200 answer is found by its root, not by a substring
        assert_eq!(
            super::error_code("<Error><Code>SlowDown</Code><Message>m</Message></Error>")
                .as_deref(),
            Some("SlowDown")
        );
        assert_eq!(
            super::error_code(
                "<CopyObjectResult><ETag>\"e\"</ETag><Note>&lt;Error&gt;</Note></CopyObjectResult>"
            ),
            None
        );
    }

    use super::*;

    #[test]
    fn encodes_keys_like_s3_signs_them() {
        assert_eq!(
            encode_key("a/b c+d%e ü~_.-"),
            "a/b%20c%2Bd%25e%20%C3%BC~_.-"
        );
    }
}
