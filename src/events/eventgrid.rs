//! Azure Blob Storage events delivered by Event Grid: to slate's webhook (a JSON array, or a
//! single event) or onto a Storage Queue (one event per queue message, base64-encoded; see
//! [`decode_queue_message`]). Both the Event Grid schema (`eventType`, `eventTime`,
//! `topic`, `dataVersion`) and CloudEvents 1.0 (`type`, `time`, `source`, `specversion`).
//!
//! The container and the key come from the subject,
//! `/blobServices/default/containers/{container}/blobs/{key…}`, which Azure documents as
//! carrying the case-preserved blob name as is (not URL-encoded), so it is taken literally.
//!
//! - `Microsoft.Storage.BlobCreated` → upsert; `BlobDeleted` → delete.
//! - `BlobRenamed` (hierarchical namespace): the subject names the new blob and
//!   `data.sourceUrl` the old one → delete(old) + upsert(new).
//! - `DirectoryDeleted` / `DirectoryRenamed` → [`Parsed::PrefixReconcile`] of the directory
//!   (both the old and the new one for a rename).
//! - `Microsoft.EventGrid.SubscriptionValidationEvent` → [`Parsed::Handshake`].
//! - Anything else (tier changes, directory creation, policy runs, …) → ignored.

use serde_json::Value;

use super::text::{
    base64_decode, check_bucket, check_key, check_size, child, display, join, loose_str, object,
    opt_str, opt_u64, parse_json, req_str, url_decode,
};
use super::{ChangeEvent, EventKind, ParseError, Parsed, Token};

const SUBJECT_PREFIX: &str = "/blobServices/default/containers/";

/// Parses an Event Grid delivery: one event object, or an array of them (a batch). In a batch
/// each malformed event becomes a [`Parsed::Invalid`] beside the good ones; a batch with no
/// good event fails as a whole.
pub fn parse_eventgrid(body: &str) -> Result<Parsed, ParseError> {
    check_size("body", body.len())?;
    let v = parse_json("body", body)?;
    match &v {
        Value::Array(items) if items.is_empty() => Ok(Parsed::Ignore("eventgrid: empty batch")),
        Value::Array(items) => {
            // each event on its own: a malformed one must not take the others with it
            let (mut good, mut bad) = (Vec::with_capacity(items.len()), super::Bad::default());
            for (i, item) in items.iter().enumerate() {
                match parse_event(item, &format!("[{i}]")) {
                    Ok(p) => good.push(p),
                    Err(e) => bad.push(e),
                }
            }
            Parsed::from_parts(good, bad)
        }
        Value::Object(_) => parse_event(&v, ""),
        _ => Err(ParseError::new(
            "body: expected an event object or an array of events",
        )),
    }
}

/// The text of one Storage Queue message as Event Grid writes it: base64 of the event's JSON.
/// Plain JSON (starting with `{` or `[`) is accepted as is, for queues fed by hand.
pub fn decode_queue_message(text: &str) -> Result<String, ParseError> {
    check_size("queue message", text.len())?;
    let t = text.trim();
    if t.is_empty() {
        return Err(ParseError::new("queue message: empty"));
    }
    if t.starts_with('{') || t.starts_with('[') {
        return Ok(t.to_string());
    }
    let bytes = base64_decode(t)
        .ok_or_else(|| ParseError::new("queue message: neither JSON nor base64"))?;
    String::from_utf8(bytes)
        .map_err(|_| ParseError::new("queue message: base64 content is not UTF-8"))
}

/// The two envelopes differ only in the names of the type and time fields.
struct Envelope<'a> {
    event_type: &'a str,
    time: Option<String>,
    id: Option<String>,
}

fn envelope<'a>(v: &'a Value, path: &str) -> Result<Envelope<'a>, ParseError> {
    let obj = object(v, path)?;
    let cloud_events = obj.contains_key("specversion") || !obj.contains_key("eventType");
    let (type_field, time_field) = if cloud_events {
        ("type", "time")
    } else {
        ("eventType", "eventTime")
    };
    if cloud_events && !obj.contains_key("type") {
        return Err(ParseError::new(format!(
            "{}: neither eventType (Event Grid schema) nor type (CloudEvents)",
            display(path)
        )));
    }
    Ok(Envelope {
        event_type: req_str(v, type_field, path)?,
        time: loose_str(v, time_field),
        id: loose_str(v, "id"),
    })
}

fn parse_event(v: &Value, path: &str) -> Result<Parsed, ParseError> {
    let env = envelope(v, path)?;
    let data_path = join(path, "data");
    match env.event_type {
        "Microsoft.EventGrid.SubscriptionValidationEvent" => {
            let code = req_str(child(v, "data", path)?, "validationCode", &data_path)?;
            if code.is_empty() {
                return Err(ParseError::new(format!(
                    "{data_path}.validationCode: empty"
                )));
            }
            Ok(Parsed::Handshake {
                validation_code: code.to_string(),
            })
        }
        "Microsoft.EventGrid.SubscriptionDeletedEvent" => {
            Ok(Parsed::Ignore("eventgrid: subscription deleted"))
        }
        "Microsoft.Storage.BlobCreated" | "Microsoft.Storage.BlobDeleted" => {
            let (bucket, key) = subject_blob(v, path)?;
            let data = child(v, "data", path)?;
            object(data, &data_path)?;
            let created = env.event_type == "Microsoft.Storage.BlobCreated";
            Ok(Parsed::Events(vec![ChangeEvent {
                bucket,
                key,
                kind: if created {
                    EventKind::Upsert
                } else {
                    EventKind::Delete
                },
                etag: opt_str(data, "eTag", &data_path)?.map(str::to_string),
                size: opt_u64(data, "contentLength", &data_path)?,
                sequencer: sequencer(data),
                event_time: env.time,
                id: env.id,
            }]))
        }
        "Microsoft.Storage.BlobRenamed" => {
            let (bucket, key) = subject_blob(v, path)?;
            let data = child(v, "data", path)?;
            let (old_bucket, old_key) = renamed_from(data, &data_path, &bucket, &key)?;
            let sequencer = sequencer(data);
            let event = |bucket: String, key: String, kind: EventKind| ChangeEvent {
                bucket,
                key,
                kind,
                etag: None,
                size: None,
                sequencer: sequencer.clone(),
                event_time: env.time.clone(),
                id: env.id.clone(),
            };
            Ok(Parsed::Events(vec![
                event(old_bucket, old_key, EventKind::Delete),
                event(bucket, key, EventKind::Upsert),
            ]))
        }
        "Microsoft.Storage.DirectoryDeleted" => {
            let (bucket, dir) = subject_blob(v, path)?;
            Ok(Parsed::PrefixReconcile {
                bucket,
                prefix: dir_prefix(dir),
            })
        }
        "Microsoft.Storage.DirectoryRenamed" => {
            let (bucket, dir) = subject_blob(v, path)?;
            let data = child(v, "data", path)?;
            let (old_bucket, old_dir) = renamed_from(data, &data_path, &bucket, &dir)?;
            Ok(Parsed::Batch(vec![
                Parsed::PrefixReconcile {
                    bucket: old_bucket,
                    prefix: dir_prefix(old_dir),
                },
                Parsed::PrefixReconcile {
                    bucket,
                    prefix: dir_prefix(dir),
                },
            ]))
        }
        _ => Ok(Parsed::Ignore("eventgrid: event type not handled")),
    }
}

fn sequencer(data: &Value) -> Option<Token> {
    // a sequencer that is not a string orders nothing: the event is kept without one (an
    // untokened event is never outranked), not refused with the change it names
    data.get("sequencer")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| Token::EventGrid(s.to_string()))
}

/// A directory path as a key prefix that cannot match its siblings (`a/b` → `a/b/`).
fn dir_prefix(mut dir: String) -> String {
    if !dir.ends_with('/') {
        dir.push('/');
    }
    dir
}

/// Container and blob name from `/blobServices/default/containers/{c}/blobs/{name…}`.
pub(crate) fn subject_blob(v: &Value, path: &str) -> Result<(String, String), ParseError> {
    let what = join(path, "subject");
    let subject = req_str(v, "subject", path)?;
    let rest = subject.strip_prefix(SUBJECT_PREFIX).ok_or_else(|| {
        ParseError::new(format!(
            "{what}: not of the form {SUBJECT_PREFIX}{{container}}/blobs/{{name}}"
        ))
    })?;
    let (container, name) = rest
        .split_once("/blobs/")
        .ok_or_else(|| ParseError::new(format!("{what}: no /blobs/ after the container name")))?;
    let bucket = check_bucket(&what, container)?;
    Ok((bucket, check_key(&what, name.to_string())?))
}

/// The old container and name of a rename, from `data.sourceUrl`. Azure documents the URL as
/// `https://{account}.{blob|dfs}.core.windows.net/{container}/{name}`, and shows names in
/// it unencoded; emulators put the account in the path. So the URL is read the way
/// `data.destinationUrl` must be read to name the blob the subject names (as is or
/// percent-decoded, with or without leading segments), and only then applied to the source.
fn renamed_from(
    data: &Value,
    data_path: &str,
    bucket: &str,
    key: &str,
) -> Result<(String, String), ParseError> {
    let source_what = join(data_path, "sourceUrl");
    let source = url_path(&source_what, req_str(data, "sourceUrl", data_path)?)?;
    let expected = format!("{bucket}/{key}");
    let mut reading = (false, String::new()); // (percent-decode, leading segments to drop)
    if let Some(dest) = opt_str(data, "destinationUrl", data_path)? {
        let dest_what = join(data_path, "destinationUrl");
        let dest = url_path(&dest_what, dest)?;
        for decode in [false, true] {
            let Ok(d) = (if decode {
                url_decode(&dest_what, dest, false)
            } else {
                Ok(dest.to_string())
            }) else {
                continue;
            };
            if let Some(lead) = d.strip_suffix(&expected) {
                if lead.is_empty() || lead.ends_with('/') {
                    reading = (decode, lead.to_string());
                    break;
                }
            }
        }
    }
    let (decode, lead) = reading;
    let source = if decode {
        url_decode(&source_what, source, false)?
    } else {
        source.to_string()
    };
    let rest = source.strip_prefix(lead.as_str()).ok_or_else(|| {
        ParseError::new(format!(
            "{source_what}: not in the same account as destinationUrl"
        ))
    })?;
    let (container, name) = rest
        .split_once('/')
        .ok_or_else(|| ParseError::new(format!("{source_what}: no container/name in the path")))?;
    Ok((
        check_bucket(&source_what, container)?,
        check_key(&source_what, name.to_string())?,
    ))
}

/// The path of an absolute URL, without its leading `/` (the rest taken verbatim: a blob
/// name may hold `?` or `#`).
fn url_path<'a>(what: &str, url: &'a str) -> Result<&'a str, ParseError> {
    let after_scheme = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or_else(|| ParseError::new(format!("{what}: not an absolute URL")))?;
    after_scheme
        .split_once('/')
        .map(|(_, path)| path)
        .ok_or_else(|| ParseError::new(format!("{what}: no path in the URL")))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The examples from Microsoft's "Azure Blob Storage as an Event Grid source" page, in both
    // schemas (the page's BlobCreated subject says "test-container" but its url
    // "testcontainer"; the subject is what counts).

    const EG_CREATED: &str = r#"[{
      "topic": "/subscriptions/{subscription-id}/resourceGroups/Storage/providers/Microsoft.Storage/storageAccounts/my-storage-account",
      "subject": "/blobServices/default/containers/test-container/blobs/new-file.txt",
      "eventType": "Microsoft.Storage.BlobCreated",
      "eventTime": "2017-06-26T18:41:00.9584103Z",
      "id": "831e1650-001e-001b-66ab-eeb76e069631",
      "data": {
        "api": "PutBlockList",
        "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca65760",
        "requestId": "831e1650-001e-001b-66ab-eeb76e000000",
        "eTag": "\"0x8D4BCC2E4835CD0\"",
        "contentType": "text/plain",
        "contentLength": 524288,
        "blobType": "BlockBlob",
        "url": "https://my-storage-account.blob.core.windows.net/testcontainer/new-file.txt",
        "sequencer": "00000000000004420000000000028963",
        "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"}
      },
      "dataVersion": "",
      "metadataVersion": "1"
    }]"#;

    const CE_DELETED: &str = r#"[{
      "source": "/subscriptions/{subscription-id}/resourceGroups/Storage/providers/Microsoft.Storage/storageAccounts/my-storage-account",
      "subject": "/blobServices/default/containers/testcontainer/blobs/file-to-delete.txt",
      "type": "Microsoft.Storage.BlobDeleted",
      "time": "2017-11-07T20:09:22.5674003Z",
      "id": "4c2359fe-001e-00ba-0e04-58586806d298",
      "data": {
        "api": "DeleteBlob",
        "requestId": "4c2359fe-001e-00ba-0e04-585868000000",
        "contentType": "text/plain",
        "blobType": "BlockBlob",
        "url": "https://my-storage-account.blob.core.windows.net/testcontainer/file-to-delete.txt",
        "sequencer": "0000000000000281000000000002F5CA",
        "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"}
      },
      "specversion": "1.0"
    }]"#;

    const CE_RENAMED: &str = r#"[{
      "source": "/subscriptions/{subscription-id}/resourceGroups/Storage/providers/Microsoft.Storage/storageAccounts/my-storage-account",
      "subject": "/blobServices/default/containers/my-file-system/blobs/my-renamed-file.txt",
      "type": "Microsoft.Storage.BlobRenamed",
      "time": "2017-06-26T18:41:00.9584103Z",
      "id": "831e1650-001e-001b-66ab-eeb76e069631",
      "data": {
        "api": "RenameFile",
        "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca65760",
        "requestId": "831e1650-001e-001b-66ab-eeb76e000000",
        "destinationUrl": "https://my-storage-account.dfs.core.windows.net/my-file-system/my-renamed-file.txt",
        "sourceUrl": "https://my-storage-account.dfs.core.windows.net/my-file-system/my-original-file.txt",
        "sequencer": "00000000000004420000000000028963",
        "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"}
      },
      "specversion": "1.0"
    }]"#;

    const EG_DIR_DELETED: &str = r#"[{
      "topic": "/subscriptions/{subscription-id}/resourceGroups/Storage/providers/Microsoft.Storage/storageAccounts/my-storage-account",
      "subject": "/blobServices/default/containers/my-file-system/blobs/directory-to-delete",
      "eventType": "Microsoft.Storage.DirectoryDeleted",
      "eventTime": "2017-06-26T18:41:00.9584103Z",
      "id": "831e1650-001e-001b-66ab-eeb76e069631",
      "data": {
        "api": "DeleteDirectory",
        "clientRequestId": "6d79dbfb-0e37-4fc4-981f-442c9ca65760",
        "requestId": "831e1650-001e-001b-66ab-eeb76e000000",
        "url": "https://my-storage-account.dfs.core.windows.net/my-file-system/directory-to-delete",
        "recursive": "true",
        "sequencer": "00000000000004420000000000028963",
        "storageDiagnostics": {"batchId": "b68529f3-68cd-4744-baa4-3c0498ec19f0"}
      },
      "dataVersion": "1",
      "metadataVersion": "1"
    }]"#;

    const EG_VALIDATION: &str = r#"[{
      "id": "2d1781af-3a4c-4d7c-bd0c-e34b19da4e66",
      "topic": "/subscriptions/xx/resourceGroups/xx/providers/Microsoft.Storage/storageAccounts/xx",
      "subject": "",
      "data": {
        "validationCode": "512d38b6-c7b8-40c8-89fe-f46f9e9622b6",
        "validationUrl": "https://rp-eastus2.eventgrid.azure.net:553/eventsubscriptions/myeventsub/validate?id=0000000000-0000-0000-0000-00000000000000&t=2022-10-28T04:23:35.1981776Z&apiVersion=2018-05-01-preview&token=1A1A1A1A"
      },
      "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
      "eventTime": "2022-10-28T04:23:35.1981776Z",
      "metadataVersion": "1",
      "dataVersion": "1"
    }]"#;

    fn blob_event(schema_ce: bool, event_type: &str, subject: &str, data: Value) -> Value {
        if schema_ce {
            serde_json::json!({"source": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/acct",
                "subject": subject, "type": event_type, "time": "2024-05-01T12:00:00Z", "id": "id-1",
                "data": data, "specversion": "1.0"})
        } else {
            serde_json::json!({"topic": "/subscriptions/s/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/acct",
                "subject": subject, "eventType": event_type, "eventTime": "2024-05-01T12:00:00Z", "id": "id-1",
                "data": data, "dataVersion": "", "metadataVersion": "1"})
        }
    }

    #[test]
    fn documented_blob_created_event_grid_schema() {
        let got = parse_eventgrid(EG_CREATED).unwrap();
        assert_eq!(
            got,
            Parsed::Events(vec![ChangeEvent {
                bucket: "test-container".into(),
                key: "new-file.txt".into(),
                kind: EventKind::Upsert,
                etag: Some("\"0x8D4BCC2E4835CD0\"".into()),
                size: Some(524288),
                sequencer: Some(Token::EventGrid("00000000000004420000000000028963".into())),
                event_time: Some("2017-06-26T18:41:00.9584103Z".into()),
                id: Some("831e1650-001e-001b-66ab-eeb76e069631".into()),
            }])
        );
    }

    #[test]
    fn documented_blob_deleted_cloudevents() {
        let got = parse_eventgrid(CE_DELETED).unwrap();
        let e = &got.events().unwrap()[0];
        assert_eq!(e.bucket, "testcontainer");
        assert_eq!(e.key, "file-to-delete.txt");
        assert_eq!(e.kind, EventKind::Delete);
        assert_eq!((e.etag.as_deref(), e.size), (None, None));
        assert_eq!(
            e.event_time.as_deref(),
            Some("2017-11-07T20:09:22.5674003Z")
        );
        assert_eq!(
            e.id.as_deref(),
            Some("4c2359fe-001e-00ba-0e04-58586806d298")
        );
    }

    #[test]
    fn single_object_and_both_schemas_agree() {
        for ce in [false, true] {
            let v = blob_event(
                ce,
                "Microsoft.Storage.BlobCreated",
                "/blobServices/default/containers/c1/blobs/dir/sub/a b+c%2B ü.txt",
                serde_json::json!({"api": "PutBlob", "eTag": "0x8D4E44A24ABE7F1", "contentLength": 447,
                    "url": "https://acct.blob.core.windows.net/c1/dir/sub/a%20b+c%252B%20%C3%BC.txt",
                    "sequencer": "00000000000000EB000000000000C65A"}),
            );
            let got = parse_eventgrid(&v.to_string()).unwrap();
            let e = &got.events().unwrap()[0];
            assert_eq!(e.bucket, "c1");
            assert_eq!(
                e.key, "dir/sub/a b+c%2B ü.txt",
                "subject taken literally (ce={ce})"
            );
            assert_eq!(e.size, Some(447));
            assert_eq!(e.event_time.as_deref(), Some("2024-05-01T12:00:00Z"));
        }
    }

    #[test]
    fn batch_of_mixed_events() {
        let created: Vec<Value> = serde_json::from_str(EG_CREATED).unwrap();
        let deleted: Vec<Value> = serde_json::from_str(CE_DELETED).unwrap();
        let tier = blob_event(
            false,
            "Microsoft.Storage.BlobTierChanged",
            "/blobServices/default/containers/testcontainer/blobs/Auto.jpg",
            serde_json::json!({"api": "SetBlobTier"}),
        );
        let dir: Vec<Value> = serde_json::from_str(EG_DIR_DELETED).unwrap();
        let body = Value::Array(vec![
            created[0].clone(),
            tier,
            deleted[0].clone(),
            dir[0].clone(),
        ]);
        let got = parse_eventgrid(&body.to_string()).unwrap();
        let Parsed::Batch(items) = got else {
            panic!("expected a batch, got {got:?}")
        };
        assert_eq!(items.len(), 2);
        let keys: Vec<_> = items[0]
            .events()
            .unwrap()
            .iter()
            .map(|e| (e.key.as_str(), e.kind.clone()))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("new-file.txt", EventKind::Upsert),
                ("file-to-delete.txt", EventKind::Delete)
            ]
        );
        assert_eq!(
            items[1],
            Parsed::PrefixReconcile {
                bucket: "my-file-system".into(),
                prefix: "directory-to-delete/".into()
            }
        );
        // A batch of blob events only is one Events.
        let two = Value::Array(vec![created[0].clone(), deleted[0].clone()]);
        assert_eq!(
            parse_eventgrid(&two.to_string())
                .unwrap()
                .events()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_malformed_event_does_not_take_its_batch_with_it() {
        let created: Vec<Value> = serde_json::from_str(EG_CREATED).unwrap();
        let deleted: Vec<Value> = serde_json::from_str(CE_DELETED).unwrap();
        let (created, deleted) = (created[0].clone(), deleted[0].clone());
        let no_subject = serde_json::json!({"eventType": "Microsoft.Storage.BlobCreated",
            "data": {"url": "https://SECRET-SHOULD-NOT-BE-ECHOED"}});
        let bad_key = blob_event(
            true,
            "Microsoft.Storage.BlobDeleted",
            "/blobServices/default/containers/c/blobs/SECRET\u{0}",
            serde_json::json!({}),
        );
        let tier = blob_event(
            false,
            "Microsoft.Storage.BlobTierChanged",
            "/blobServices/default/containers/c/blobs/t",
            serde_json::json!({}),
        );
        let dir: Vec<Value> = serde_json::from_str(EG_DIR_DELETED).unwrap();
        let keys = |p: &Parsed| -> Vec<String> {
            p.events()
                .map(|e| e.iter().map(|e| e.key.clone()).collect())
                .unwrap_or_default()
        };
        // (batch, keys kept, other good entries, reasons of the bad ones)
        type Case<'a> = (Vec<Value>, Vec<&'a str>, usize, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (
                vec![created.clone(), no_subject.clone(), deleted.clone()],
                vec!["new-file.txt", "file-to-delete.txt"],
                0,
                vec!["[1].subject: missing"],
            ),
            (
                vec![bad_key.clone(), tier.clone(), created.clone(), Value::Null],
                vec!["new-file.txt"],
                0,
                vec![
                    "[0].subject: key contains NUL",
                    "[3]: expected an object, found null",
                ],
            ),
            (
                vec![dir[0].clone(), no_subject.clone()],
                vec![],
                1,
                vec!["[1].subject: missing"],
            ),
        ];
        for (batch, want_keys, others, reasons) in cases {
            let body = Value::Array(batch).to_string();
            let got = parse_eventgrid(&body).unwrap();
            let Parsed::Batch(items) = &got else {
                panic!("expected a batch, got {got:?}")
            };
            let kept: Vec<String> = items.iter().flat_map(keys).collect();
            assert_eq!(kept, want_keys, "{got:?}");
            let bad: Vec<&str> = items
                .iter()
                .filter_map(|p| match p {
                    Parsed::Invalid(why) => Some(why.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(bad, reasons, "{got:?}");
            let good_others = items.len() - bad.len() - usize::from(!want_keys.is_empty());
            assert_eq!(good_others, others, "{got:?}");
            assert!(!format!("{got:?}").contains("SECRET"), "{got:?}");
        }
        // nothing good in the batch: it fails as a whole, as one bad event did before
        for (batch, want) in [
            (vec![no_subject.clone()], "[0].subject: missing"),
            (
                vec![tier.clone(), no_subject.clone()],
                "[1].subject: missing",
            ),
            (
                vec![no_subject.clone(), bad_key, no_subject],
                "[0].subject: missing (and 2 more malformed events)",
            ),
        ] {
            let body = Value::Array(batch).to_string();
            crate::events::assert_rejected(parse_eventgrid(&body), want, "SECRET");
        }
    }

    #[test]
    fn validation_handshake() {
        assert_eq!(
            parse_eventgrid(EG_VALIDATION),
            Ok(Parsed::Handshake {
                validation_code: "512d38b6-c7b8-40c8-89fe-f46f9e9622b6".into()
            })
        );
        // Unwrapped (a single object) too.
        let one: Vec<Value> = serde_json::from_str(EG_VALIDATION).unwrap();
        assert!(matches!(
            parse_eventgrid(&one[0].to_string()),
            Ok(Parsed::Handshake { .. })
        ));
    }

    #[test]
    fn blob_renamed_is_delete_old_plus_upsert_new() {
        let got = parse_eventgrid(CE_RENAMED).unwrap();
        let e = got.events().unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].bucket.as_str(), e[0].key.as_str(), e[0].kind.clone()),
            ("my-file-system", "my-original-file.txt", EventKind::Delete)
        );
        assert_eq!(
            (e[1].bucket.as_str(), e[1].key.as_str(), e[1].kind.clone()),
            ("my-file-system", "my-renamed-file.txt", EventKind::Upsert)
        );
        assert_eq!(e[0].sequencer, e[1].sequencer);
    }

    #[test]
    fn rename_url_reading_table() {
        // (subject name, destinationUrl, sourceUrl, expected old (container, key))
        let cases = [
            // As documented: names unencoded in the URLs.
            (
                "d/new name.txt",
                Some("https://a.dfs.core.windows.net/fs/d/new name.txt"),
                "https://a.dfs.core.windows.net/fs/d/old name.txt",
                ("fs", "d/old name.txt"),
            ),
            // Percent-encoded URLs: detected from destinationUrl, applied to sourceUrl.
            (
                "d/new name.txt",
                Some("https://a.dfs.core.windows.net/fs/d/new%20name.txt"),
                "https://a.dfs.core.windows.net/fs/d/old%20name%25.txt",
                ("fs", "d/old name%.txt"),
            ),
            // A literal '%' stays literal when destinationUrl shows URLs are not encoded.
            (
                "100%.txt",
                Some("https://a.blob.core.windows.net/fs/100%.txt"),
                "https://a.blob.core.windows.net/fs/50%25.txt",
                ("fs", "50%25.txt"),
            ),
            // '?' and '#' in names are part of the name.
            (
                "q?a#b",
                Some("https://a.blob.core.windows.net/fs/q?a#b"),
                "https://a.blob.core.windows.net/fs/old?x#y",
                ("fs", "old?x#y"),
            ),
            // Emulator style: account in the path.
            (
                "new.txt",
                Some("http://127.0.0.1:10000/devstoreaccount1/fs/new.txt"),
                "http://127.0.0.1:10000/devstoreaccount1/fs/dir/old.txt",
                ("fs", "dir/old.txt"),
            ),
            // No destinationUrl: the documented form is assumed.
            (
                "new.txt",
                None,
                "https://a.blob.core.windows.net/fs/old.txt",
                ("fs", "old.txt"),
            ),
            // Moved across folders within the file system.
            (
                "b/x.bin",
                Some("https://a.dfs.core.windows.net/fs/b/x.bin"),
                "https://a.dfs.core.windows.net/fs/a/x.bin",
                ("fs", "a/x.bin"),
            ),
        ];
        for (name, dest, source, (want_c, want_k)) in cases {
            let mut data =
                serde_json::json!({"api": "RenameFile", "sourceUrl": source, "sequencer": "01"});
            if let Some(d) = dest {
                data["destinationUrl"] = Value::String(d.into());
            }
            let v = blob_event(
                true,
                "Microsoft.Storage.BlobRenamed",
                &format!("/blobServices/default/containers/fs/blobs/{name}"),
                data,
            );
            let got = parse_eventgrid(&v.to_string()).unwrap();
            let e = got.events().unwrap();
            assert_eq!(
                (e[0].bucket.as_str(), e[0].key.as_str()),
                (want_c, want_k),
                "{source}"
            );
            assert_eq!(e[1].key, name);
        }
    }

    #[test]
    fn directory_events() {
        assert_eq!(
            parse_eventgrid(EG_DIR_DELETED),
            Ok(Parsed::PrefixReconcile {
                bucket: "my-file-system".into(),
                prefix: "directory-to-delete/".into()
            })
        );
        let renamed = blob_event(
            true,
            "Microsoft.Storage.DirectoryRenamed",
            "/blobServices/default/containers/my-file-system/blobs/my-renamed-directory",
            serde_json::json!({"api": "RenameDirectory",
                "destinationUrl": "https://my-storage-account.dfs.core.windows.net/my-file-system/my-renamed-directory",
                "sourceUrl": "https://my-storage-account.dfs.core.windows.net/my-file-system/my-original-directory",
                "sequencer": "00000000000004420000000000028963"}),
        );
        let prefix = |p: &str| Parsed::PrefixReconcile {
            bucket: "my-file-system".into(),
            prefix: p.into(),
        };
        assert_eq!(
            parse_eventgrid(&renamed.to_string()),
            Ok(Parsed::Batch(vec![
                prefix("my-original-directory/"),
                prefix("my-renamed-directory/")
            ]))
        );
    }

    #[test]
    fn other_event_types_are_ignored() {
        for t in [
            "Microsoft.Storage.BlobTierChanged",
            "Microsoft.Storage.AsyncOperationInitiated",
            "Microsoft.Storage.DirectoryCreated",
            "Microsoft.Storage.BlobInventoryPolicyCompleted",
            "Microsoft.Storage.LifecyclePolicyCompleted",
            "Microsoft.Resources.ResourceWriteSuccess",
            "Contoso.Items.ItemReceived",
        ] {
            for ce in [false, true] {
                let v = blob_event(
                    ce,
                    t,
                    "BlobDataManagement/LifeCycleManagement/SummaryReport",
                    serde_json::json!({}),
                );
                assert_eq!(
                    parse_eventgrid(&v.to_string()),
                    Ok(Parsed::Ignore("eventgrid: event type not handled")),
                    "{t}"
                );
            }
        }
        assert_eq!(
            parse_eventgrid("[]"),
            Ok(Parsed::Ignore("eventgrid: empty batch"))
        );
    }

    #[test]
    fn queue_message_decoding() {
        let one: Vec<Value> = serde_json::from_str(EG_CREATED).unwrap();
        let json = one[0].to_string();
        let b64 = crate::events::text::base64_encode(json.as_bytes());
        // Base64 as Event Grid writes it, plain JSON, and surrounding whitespace.
        for text in [b64.clone(), json.clone(), format!("\n {b64} \n")] {
            let decoded = decode_queue_message(&text).unwrap();
            assert_eq!(decoded, json);
            assert_eq!(
                parse_eventgrid(&decoded).unwrap().events().unwrap()[0].key,
                "new-file.txt"
            );
        }
        let bad = [
            ("", "queue message: empty"),
            ("   ", "queue message: empty"),
            ("not base64!", "queue message: neither JSON nor base64"),
            ("Zg=a", "queue message: neither JSON nor base64"),
            ("/w==", "queue message: base64 content is not UTF-8"), // 0xFF
        ];
        for (text, want) in bad {
            assert_eq!(
                decode_queue_message(text).unwrap_err().reason,
                want,
                "{text:?}"
            );
        }
        let huge = "A".repeat(1100 * 1024);
        assert!(decode_queue_message(&huge)
            .unwrap_err()
            .reason
            .starts_with("queue message: 1126400 bytes"));
    }

    #[test]
    fn mutated_messages_never_panic() {
        for fixture in [
            EG_CREATED,
            CE_DELETED,
            CE_RENAMED,
            EG_DIR_DELETED,
            EG_VALIDATION,
        ] {
            for m in crate::events::mutants(fixture.as_bytes(), 3000) {
                let text = String::from_utf8_lossy(&m);
                let _ = parse_eventgrid(&text);
                let _ = decode_queue_message(&text).map(|t| parse_eventgrid(&t));
            }
            let b64 = crate::events::text::base64_encode(fixture.as_bytes());
            for m in crate::events::mutants(b64.as_bytes(), 500) {
                let _ =
                    decode_queue_message(&String::from_utf8_lossy(&m)).map(|t| parse_eventgrid(&t));
            }
            let v: Value = serde_json::from_str(fixture).unwrap();
            for m in crate::events::value_mutants(&v) {
                let _ = parse_eventgrid(&m.to_string());
            }
        }
    }

    #[test]
    fn hostile_bodies() {
        let secret = "SECRET-SHOULD-NOT-BE-ECHOED";
        let created = |subject: &str| {
            blob_event(
                false,
                "Microsoft.Storage.BlobCreated",
                subject,
                serde_json::json!({"contentLength": 1}),
            )
            .to_string()
        };
        let cases: Vec<(String, &str)> = vec![
            ("".into(), "body: empty"),
            ("null".into(), "body: expected an event object or an array"),
            ("42".into(), "body: expected an event object or an array"),
            (format!("\"{secret}\""), "body: expected an event object or an array"),
            (format!("[{secret}]"), "body: not JSON"),
            (format!("{}{}", "[".repeat(5000), "]".repeat(5000)), "body: not JSON"),
            (format!("[{{\"pad\":\"{}\"}}]", "x".repeat(1100 * 1024)), "body: 112"),
            ("[null]".into(), "[0]: expected an object, found null"),
            ("[[]]".into(), "[0]: expected an object, found an array"),
            ("{}".into(), "body: neither eventType"),
            (format!(r#"[{{"hello":"{secret}"}}]"#), "[0]: neither eventType"),
            (r#"{"eventType":7}"#.into(), "eventType: expected a string"),
            (r#"{"type":null,"specversion":"1.0"}"#.into(), "type: missing"),
            (r#"[{"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent"}]"#.into(), "[0].data: missing"),
            (r#"[{"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","data":{}}]"#.into(), "[0].data.validationCode: missing"),
            (r#"[{"eventType":"Microsoft.EventGrid.SubscriptionValidationEvent","data":{"validationCode":""}}]"#.into(), "[0].data.validationCode: empty"),
            (r#"[{"eventType":"Microsoft.Storage.BlobCreated","data":{}}]"#.into(), "[0].subject: missing"),
            (created("/blobServices/default/containers/c/blobs/"), "subject: empty key"),
            (created("/blobServices/default/containers//blobs/k"), "subject: empty bucket name"),
            (created("/blobServices/default/containers/c/k"), "subject: no /blobs/"),
            (created(&format!("/other/{secret}")), "subject: not of the form"),
            (created("/blobServices/default/containers/c/blobs/a\u{0}b"), "subject: key contains NUL"),
            (r#"{"eventType":"Microsoft.Storage.BlobCreated","subject":"/blobServices/default/containers/c/blobs/k"}"#.into(), "data: missing"),
            (r#"{"eventType":"Microsoft.Storage.BlobCreated","subject":"/blobServices/default/containers/c/blobs/k","data":[1]}"#.into(), "data: expected an object"),
            (r#"{"eventType":"Microsoft.Storage.BlobCreated","subject":"/blobServices/default/containers/c/blobs/k","data":{"contentLength":"12x"}}"#.into(), "data.contentLength: expected a non-negative integer"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{}}"#.into(), "data.sourceUrl: missing"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{"sourceUrl":"relative/path"}}"#.into(), "data.sourceUrl: not an absolute URL"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{"sourceUrl":"https://host"}}"#.into(), "data.sourceUrl: no path"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{"sourceUrl":"https://host/c"}}"#.into(), "data.sourceUrl: no container/name"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{"sourceUrl":"https://host/c/"}}"#.into(), "data.sourceUrl: empty key"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k%20","data":{"destinationUrl":"https://h/c/k%2520","sourceUrl":"https://h/c/%C3%28"}}"#.into(), "data.sourceUrl: not UTF-8"),
            (r#"{"eventType":"Microsoft.Storage.BlobRenamed","subject":"/blobServices/default/containers/c/blobs/k","data":{"destinationUrl":"https://h/acct/c/k","sourceUrl":"https://h/other/c/j"}}"#.into(), "data.sourceUrl: not in the same account"),
        ];
        for (body, want) in &cases {
            crate::events::assert_rejected(parse_eventgrid(body), want, secret);
        }
    }
}
