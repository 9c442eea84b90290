//! The Azure Blob calls object_store does not make with an object's properties: Put Block
//! List (the completion of a multipart upload) with the Content-* headers, user metadata and
//! access tier, and Set Blob Properties / Set Blob Metadata / Set Blob Tier, which change
//! them without moving the bytes. Signed with object_store's own Azure authorizer (shared
//! key, SAS or Entra token, whichever the environment gave).

use http::Request;
use object_store::azure::{AzureAuthorizer, AzureConfigKey, MicrosoftAzure};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody};
use object_store::multipart::PartId;
use std::collections::BTreeMap;

use object_store::{Attribute, Attributes};

use super::retry::ChunkError;
use super::s3copy::encode_key;
use crate::core::error::{Result, SlateError};
use crate::core::location::Location;
use crate::stores::{azure_builder, http_options};

/// Signed Blob requests against one container.
#[derive(Debug)]
pub struct AzureBlob {
    azure: MicrosoftAzure,
    http: HttpClient,
    account: String,
    /// `https://account.blob.core.windows.net/container` (Azurite: with the account in the path).
    container_url: String,
}

/// The Put Blob / Put Block List header of each property.
fn blob_header(attr: &Attribute) -> Option<String> {
    Some(match attr {
        Attribute::ContentType => "x-ms-blob-content-type".into(),
        Attribute::ContentEncoding => "x-ms-blob-content-encoding".into(),
        Attribute::ContentLanguage => "x-ms-blob-content-language".into(),
        Attribute::ContentDisposition => "x-ms-blob-content-disposition".into(),
        Attribute::CacheControl => "x-ms-blob-cache-control".into(),
        Attribute::StorageClass => "x-ms-access-tier".into(),
        Attribute::Metadata(name) => format!("x-ms-meta-{name}"),
        _ => return None,
    })
}

/// `tags` as Azure takes them, each change logged with the blob's key.
fn fit_tags(
    key: &str,
    tags: &BTreeMap<String, String>,
) -> std::result::Result<BTreeMap<String, String>, String> {
    let (tags, notes) = crate::core::meta::azure_tags(tags)?;
    for n in notes {
        tracing::info!(key = %key, "{}", n.0);
    }
    Ok(tags)
}

/// Which headers one call sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    All,
    Properties,
    Metadata,
    Tier,
}

fn headers(attrs: &Attributes, only: Only) -> Vec<(String, String)> {
    attrs
        .iter()
        .filter(|(k, _)| match only {
            Only::All => true,
            Only::Metadata => matches!(k, Attribute::Metadata(_)),
            Only::Tier => matches!(k, Attribute::StorageClass),
            Only::Properties => !matches!(k, Attribute::Metadata(_) | Attribute::StorageClass),
        })
        .filter_map(|(k, v)| blob_header(k).map(|h| (h, v.to_string())))
        .collect()
}

impl AzureBlob {
    pub fn for_location(loc: &Location) -> Result<AzureBlob> {
        let (b, allow_http) = azure_builder(loc)?;
        let emulator = b
            .get_config_value(&AzureConfigKey::UseEmulator)
            .is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1"));
        let account = b
            .get_config_value(&AzureConfigKey::AccountName)
            .unwrap_or_else(|| "devstoreaccount1".into());
        let endpoint = b.get_config_value(&AzureConfigKey::Endpoint);
        let base = match (emulator, endpoint) {
            (_, Some(ep)) => ep.trim_end_matches('/').to_string(),
            (true, None) => {
                let url = std::env::var("AZURITE_BLOB_STORAGE_URL")
                    .ok()
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| "http://127.0.0.1:10000".into());
                format!("{}/{account}", url.trim_end_matches('/'))
            }
            (false, None) => format!("https://{account}.blob.core.windows.net"),
        };
        let err = |e: String| SlateError::Store {
            url: loc.to_string(),
            detail: e,
        };
        let azure = b
            .with_client_options(http_options(allow_http))
            .build()
            .map_err(|e| err(e.to_string()))?;
        let http =
            crate::stores::requests::CountingConnector::new(crate::core::location::Scheme::Azure)
                .connect(&http_options(allow_http))
                .map_err(|e| err(e.to_string()))?;
        Ok(AzureBlob {
            azure,
            http,
            account,
            container_url: format!("{base}/{}", loc.bucket),
        })
    }

    /// Commits the blocks `parts` (in order) as `key`, with the properties, metadata and tier
    /// of `attrs`: the blob becomes visible complete and with them. Returns its ETag.
    pub async fn put_block_list(
        &self,
        key: &str,
        parts: &[PartId],
        attrs: &Attributes,
        tags: &BTreeMap<String, String>,
    ) -> std::result::Result<Option<String>, String> {
        use base64::Engine as _;
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<BlockList>\n");
        for p in parts {
            let id = base64::engine::general_purpose::STANDARD.encode(p.content_id.as_bytes());
            // Latest: the block just put, and after a commit whose answer was lost (a retry)
            // the committed block of that id
            xml.push_str(&format!("\t<Latest>{id}</Latest>\n"));
        }
        xml.push_str("</BlockList>");
        let mut h = headers(attrs, Only::All);
        if !tags.is_empty() {
            let tags = fit_tags(key, tags)?;
            h.push((
                "x-ms-tags".into(),
                crate::stores::s3tags::encode_tags(&tags),
            ));
        }
        self.call(key, "blocklist", h, xml.into_bytes()).await
    }

    /// Replaces `key`'s properties, metadata and (when `attrs` names one) tier with `attrs`,
    /// without moving its bytes: three calls, as Azure has no one call for all of them.
    /// Returns the blob's ETag after the change.
    pub async fn set_all(
        &self,
        key: &str,
        attrs: &Attributes,
        tags: Option<&BTreeMap<String, String>>,
    ) -> std::result::Result<Option<String>, String> {
        // Set Blob Properties clears what it is not sent: the Content-MD5 goes back as it
        // was; both calls apply only to the blob as read, so a writer in between is not undone
        let (etag, md5, tag_count) = self.head(key).await?;
        let mut props = headers(attrs, Only::Properties);
        if let Some(m) = md5 {
            props.push(("x-ms-blob-content-md5".into(), m));
        }
        let guard = |h: &mut Vec<(String, String)>, etag: &Option<String>| {
            if let Some(e) = etag {
                h.push(("if-match".into(), e.clone()));
            }
        };
        guard(&mut props, &etag);
        let etag = self.call(key, "properties", props, Vec::new()).await?;
        let mut meta = headers(attrs, Only::Metadata);
        guard(&mut meta, &etag);
        let etag = self.call(key, "metadata", meta, Vec::new()).await?;
        let tier = headers(attrs, Only::Tier);
        if !tier.is_empty() {
            // a tier change leaves the ETag as it is
            self.call(key, "tier", tier, Vec::new()).await?;
        }
        // blob index tags, replaced as a whole (none clears them; without, they stay); the
        // ETag stays. None on either side: nothing to send.
        let Some(tags) = tags.filter(|t| !t.is_empty() || tag_count > 0) else {
            return Ok(etag);
        };
        let tags = fit_tags(key, tags)?;
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><Tags><TagSet>");
        for (k, v) in tags {
            xml.push_str(&format!(
                "<Tag><Key>{}</Key><Value>{}</Value></Tag>",
                quick_xml::escape::escape(k.as_str()),
                quick_xml::escape::escape(v.as_str())
            ));
        }
        xml.push_str("</TagSet></Tags>");
        if let Err(e) = self.call(key, "tags", Vec::new(), xml.into_bytes()).await {
            // no right to set tags (a SAS without `t`, no tags role): the properties and
            // metadata stand; the tags are said not carried, once
            if !e.contains("403") {
                return Err(e);
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| {
                tracing::warn!("blob index tags are not carried: setting them answered {e}")
            });
        }
        Ok(etag)
    }

    /// `attempt` on the one retry budget of a request to `key`, its error as text.
    async fn retried<T, F, Fut>(&self, key: &str, attempt: F) -> std::result::Result<T, String>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, ChunkError>>,
    {
        super::retry::signed_call("az", key, attempt).await
    }

    /// The ids of the blocks put to `key` and not committed yet (Get Block List), as
    /// object_store names them (decoded from base64). Empty when the blob has none, or does
    /// not exist.
    pub async fn uncommitted_blocks(
        &self,
        key: &str,
    ) -> std::result::Result<std::collections::HashSet<String>, String> {
        self.retried(key, || async {
            let comp = Some("blocklist&blocklisttype=uncommitted");
            let resp = self.send("GET", key, comp, &[], Vec::new()).await?;
            let status = resp.status();
            if status.as_u16() == 404 {
                return Ok(Default::default());
            }
            if !status.is_success() {
                return Err(ChunkError::of_status(status, "listing blocks"));
            }
            let body = resp
                .into_body()
                .bytes()
                .await
                .map_err(|e| ChunkError::Retry(e.to_string()))?;
            Ok(block_names(&String::from_utf8_lossy(&body)))
        })
        .await
    }

    /// The blob's ETag, Content-MD5 and tag count (a signed HEAD).
    async fn head(
        &self,
        key: &str,
    ) -> std::result::Result<(Option<String>, Option<String>, u32), String> {
        self.retried(key, || async {
            let resp = self.send("HEAD", key, None, &[], Vec::new()).await?;
            let status = resp.status();
            if !status.is_success() {
                return Err(ChunkError::of_status(status, "HEAD"));
            }
            let h = |n: &str| {
                resp.headers()
                    .get(n)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let tags = h("x-ms-tag-count")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Ok((h("etag"), h("content-md5"), tags))
        })
        .await
    }

    async fn call(
        &self,
        key: &str,
        comp: &'static str,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> std::result::Result<Option<String>, String> {
        self.retried(key, || self.try_call(key, comp, &headers, body.clone()))
            .await
    }

    /// One signed request for `key` (with `?comp=` when given).
    async fn send(
        &self,
        method: &str,
        key: &str,
        comp: Option<&str>,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> std::result::Result<object_store::client::HttpResponse, ChunkError> {
        let cred = self
            .azure
            .credentials()
            .get_credential()
            .await
            .map_err(|e| ChunkError::Retry(format!("credentials: {e}")))?;
        let mut url = format!("{}/{}", self.container_url, encode_key(key));
        if let Some(c) = comp {
            url.push_str(&format!("?comp={c}"));
        }
        let mut b = Request::builder().method(method).uri(&url);
        if method != "HEAD" {
            b = b.header("content-length", body.len().to_string());
        }
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        let mut req: Request<HttpRequestBody> = b
            .body(HttpRequestBody::from(body))
            .map_err(|e| ChunkError::Fatal(e.to_string()))?;
        AzureAuthorizer::new(&cred, &self.account)
            .try_authorize(&mut req)
            .map_err(|e| ChunkError::Fatal(e.to_string()))?;
        self.http
            .execute(req)
            .await
            .map_err(|e| ChunkError::Retry(e.to_string()))
    }

    async fn try_call(
        &self,
        key: &str,
        comp: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> std::result::Result<Option<String>, ChunkError> {
        let resp = self.send("PUT", key, Some(comp), headers, body).await?;
        let status = resp.status();
        let etag = resp
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp
            .into_body()
            .bytes()
            .await
            .map(|b| String::from_utf8_lossy(&b).to_string())
            .unwrap_or_default();
        if status.is_success() {
            return Ok(etag);
        }
        let code = super::s3copy::error_code(&text).unwrap_or_default();
        Err(ChunkError::of_status(status, &format!("{comp} ({code})")))
    }
}

/// The names of the `<UncommittedBlocks>` of a Get Block List answer, decoded from base64
/// (names that do not decode are left out: they are not object_store's).
pub fn block_names(xml: &str) -> std::collections::HashSet<String> {
    use base64::Engine as _;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct BlockList {
        uncommitted_blocks: Option<Blocks>,
    }
    #[derive(serde::Deserialize, Default)]
    #[serde(rename_all = "PascalCase")]
    struct Blocks {
        #[serde(default)]
        block: Vec<Block>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Block {
        name: String,
    }
    let blocks = quick_xml::de::from_str::<BlockList>(xml)
        .ok()
        .and_then(|b| b.uncommitted_blocks)
        .unwrap_or_default();
    blocks
        .block
        .into_iter()
        .filter_map(|b| {
            let n = b.name;
            base64::engine::general_purpose::STANDARD
                .decode(n.trim())
                .ok()
        })
        .filter_map(|b| String::from_utf8(b).ok())
        .collect()
}

#[cfg(test)]
mod block_tests {
    #[test]
    fn uncommitted_block_names_are_decoded() {
        let xml = "<?xml version=\"1.0\"?><BlockList><CommittedBlocks><Block><Name>Yw==</Name>\
                   <Size>1</Size></Block></CommittedBlocks><UncommittedBlocks><Block>\
                   <Name>YWJj</Name><Size>5</Size></Block><Block><Name>!!</Name></Block>\
                   <Block><Name>ZGVm</Name></Block></UncommittedBlocks></BlockList>";
        let got = super::block_names(xml);
        let want: std::collections::HashSet<String> =
            ["abc", "def"].iter().map(|s| s.to_string()).collect();
        assert_eq!(got, want);
        assert!(super::block_names("<BlockList/>").is_empty());
    }
}
