//! GCS metadata updated in place (the JSON API's objects.patch), which object_store does not
//! offer: a metadata-only change at the source reaches a GCS replica without its bytes being
//! copied again. Authorised with object_store's own GCS credential chain. The same signed
//! JSON calls serve `slate events setup` (a bucket's notification configurations, the
//! project's GCS service agent): [`GcsPatch::storage_call`].

use http::Request;
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody};
use object_store::gcp::GoogleCloudStorage;
use object_store::{Attribute, Attributes};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};

use super::retry::{signed_call, ChunkError};
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::stores::{gcs_builder, http_options};

/// objects.patch against one bucket.
#[derive(Debug)]
pub struct GcsPatch {
    gcs: GoogleCloudStorage,
    http: HttpClient,
    /// `https://storage.googleapis.com/storage/v1/b/BUCKET/o` (or the emulator's).
    objects_url: String,
    /// `https://storage.googleapis.com/BUCKET`: the XML API, where multipart uploads live.
    xml_url: String,
    /// `https://storage.googleapis.com/storage/v1` (or the emulator's): the JSON API.
    api_url: String,
    /// Requests go unsigned (`GOOGLE_SKIP_SIGNATURE`, a remote's `anonymous = true`), as
    /// object_store's own then go: no token is asked for.
    anonymous: bool,
}

/// The JSON API's field of each property.
const FIELDS: [(&str, Attribute); 5] = [
    ("contentType", Attribute::ContentType),
    ("contentEncoding", Attribute::ContentEncoding),
    ("contentLanguage", Attribute::ContentLanguage),
    ("contentDisposition", Attribute::ContentDisposition),
    ("cacheControl", Attribute::CacheControl),
];

impl GcsPatch {
    pub fn for_location(loc: &Location) -> Result<GcsPatch> {
        let (b, allow_http, base) = gcs_builder(loc)?;
        let anonymous = b
            .get_config_value(&object_store::gcp::GoogleConfigKey::SkipSignature)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"));
        let err = |e: String| SlateError::Store {
            url: loc.to_string(),
            detail: e,
        };
        let gcs = b
            .with_client_options(http_options(allow_http))
            .build()
            .map_err(|e| err(e.to_string()))?;
        let http =
            crate::stores::requests::CountingConnector::new(crate::core::location::Scheme::Gcs)
                .connect(&http_options(allow_http))
                .map_err(|e| err(e.to_string()))?;
        let bucket = utf8_percent_encode(&loc.bucket, NON_ALPHANUMERIC);
        Ok(GcsPatch {
            gcs,
            http,
            objects_url: format!("{base}/storage/v1/b/{bucket}/o"),
            xml_url: format!("{base}/{bucket}"),
            api_url: format!("{base}/storage/v1"),
            anonymous,
        })
    }

    /// Sets `key`'s properties and user metadata to `attrs`: a property `attrs` lacks is
    /// cleared, and user metadata the object has but `attrs` lacks is removed (read first:
    /// a patch merges metadata). The storage class stays (a patch cannot change it).
    pub async fn patch(&self, key: &str, attrs: &Attributes) -> std::result::Result<(), String> {
        let url = format!(
            "{}/{}",
            self.objects_url,
            utf8_percent_encode(key, NON_ALPHANUMERIC)
        );
        let current = self.call("GET", &url, None).await?;
        let mut meta = Map::new();
        if let Some(old) = current.get("metadata").and_then(Value::as_object) {
            for k in old.keys() {
                meta.insert(k.clone(), Value::Null);
            }
        }
        let mut body = Map::new();
        for (field, attr) in FIELDS {
            let v = attrs
                .get(&attr)
                .map(|v| Value::String(v.to_string()))
                .unwrap_or(Value::Null);
            body.insert(field.into(), v);
        }
        for (k, v) in attrs.iter() {
            if let Attribute::Metadata(name) = k {
                meta.insert(name.to_string(), Value::String(v.to_string()));
            }
        }
        body.insert("metadata".into(), Value::Object(meta));
        // only the object as read: a writer in between is not undone (the patch then fails,
        // and the next run looks again)
        let metagen = current.get("metageneration").and_then(|m| match m {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        let url = match metagen {
            Some(m) => format!("{url}?ifMetagenerationMatch={m}"),
            None => url,
        };
        self.call("PATCH", &url, Some(json!(body)))
            .await
            .map(|_| ())
    }

    /// The parts the store holds of XML multipart upload `upload_id` of `key` (ListParts,
    /// every page): part number → ETag. None when the store no longer has the upload.
    pub async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> std::result::Result<Option<std::collections::HashMap<u32, String>>, String> {
        let url = format!(
            "{}/{}?uploadId={}",
            self.xml_url,
            crate::stores::s3copy::encode_key(key),
            utf8_percent_encode(upload_id, NON_ALPHANUMERIC)
        );
        let mut parts = std::collections::HashMap::new();
        let mut marker: Option<String> = None;
        loop {
            let page_url = match &marker {
                Some(m) => format!("{url}&part-number-marker={m}"),
                None => url.clone(),
            };
            let text = signed_call("gs", key, || self.try_text("GET", &page_url)).await?;
            let Some(text) = text else {
                return Ok(None);
            };
            let page = crate::stores::s3copy::parse_parts(&text)?;
            parts.extend(page.parts);
            match page.next {
                Some(n) if page.truncated => marker = Some(n),
                _ => return Ok(Some(parts)),
            }
        }
    }

    /// One signed JSON API call, `{api}{path}` (`/storage/v1` is the API's root): the status
    /// and the JSON answer (`{}` when empty or not JSON) of whatever the server answered but
    /// a 5xx or a 429, which are tried again. An error is one line without the token.
    pub async fn storage_call(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> std::result::Result<(u16, Value), String> {
        let url = format!("{}{path}", self.api_url);
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        signed_call("gs", &url, || async {
            let (status, text) = self.send(method, &url, bytes.clone()).await?;
            if status.is_server_error() || status.as_u16() == 429 {
                return Err(ChunkError::of_status(status, method));
            }
            let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({}));
            Ok((status.as_u16(), v))
        })
        .await
        .map_err(|e| format!("{method} {url}: {e}"))
    }

    /// One authorised request without a body: the answer's text, None for a 404.
    async fn try_text(
        &self,
        method: &str,
        url: &str,
    ) -> std::result::Result<Option<String>, ChunkError> {
        let (status, text) = self.send(method, url, Vec::new()).await?;
        if status.as_u16() == 404 {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(ChunkError::of_status(status, "listing parts"));
        }
        Ok(Some(text))
    }

    /// One request with the GCS credentials: the status and the answer's text.
    async fn send(
        &self,
        method: &str,
        url: &str,
        body: Vec<u8>,
    ) -> std::result::Result<(http::StatusCode, String), ChunkError> {
        let mut req = Request::builder()
            .method(method)
            .uri(url)
            .header("content-type", "application/json");
        if !self.anonymous {
            let cred = self
                .gcs
                .credentials()
                .get_credential()
                .await
                .map_err(|e| ChunkError::Retry(format!("credentials: {e}")))?;
            let mut auth = http::HeaderValue::from_str(&format!("Bearer {}", cred.bearer))
                .map_err(|_| ChunkError::Fatal("the GCS token is no header value".into()))?;
            auth.set_sensitive(true);
            req = req.header("authorization", auth);
        }
        let req: Request<HttpRequestBody> = req
            .body(HttpRequestBody::from(body))
            .map_err(|e| ChunkError::Fatal(e.to_string()))?;
        let resp = self
            .http
            .execute(req)
            .await
            .map_err(|e| ChunkError::Retry(e.to_string()))?;
        let status = resp.status();
        let text = resp
            .into_body()
            .bytes()
            .await
            .map(|b| String::from_utf8_lossy(&b).to_string())
            .unwrap_or_default();
        Ok((status, text))
    }

    async fn call(
        &self,
        method: &'static str,
        url: &str,
        body: Option<Value>,
    ) -> std::result::Result<Value, String> {
        signed_call("gs", url, || self.try_call(method, url, body.clone())).await
    }

    async fn try_call(
        &self,
        method: &str,
        url: &str,
        body: Option<Value>,
    ) -> std::result::Result<Value, ChunkError> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (status, text) = self.send(method, url, bytes).await?;
        if status.is_success() {
            return serde_json::from_str(&text)
                .map_err(|e| ChunkError::Fatal(format!("{method} answered no JSON: {e}")));
        }
        Err(ChunkError::of_status(status, method))
    }
}
