//! The cloud messages of the event property, as each provider writes them.

use std::collections::HashMap;

use serde_json::json;

use crate::history::{Ev, EvKind, BUCKET};

/// S3 form-encodes keys in notifications: `+` for a space, `%XX` for the rest; `/` is left
/// alone or encoded (both happen).
pub(crate) fn s3_encode(key: &str, slash: bool) -> String {
    let mut out = String::new();
    for b in key.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                out.push(b as char)
            }
            b'/' if !slash => out.push('/'),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// An S3 sequencer for `seq`: hex of varying width and case (S3 pads the shorter with zeros).
pub(crate) fn s3_sequencer(seq: u64) -> String {
    let hex = format!("{:0width$X}", seq, width = 1 + (seq % 5) as usize * 4);
    if seq % 2 == 0 {
        hex.to_ascii_lowercase()
    } else {
        hex
    }
}

pub(crate) fn s3_record(full_key: &str, e: &Ev, with_seq: bool, shape: u8) -> serde_json::Value {
    let created = e.kind == EvKind::Created;
    let mut object = json!({ "key": s3_encode(full_key, shape & 8 != 0) });
    if created {
        object["size"] = json!(e.size);
        object["eTag"] = json!(format!("{:032x}", e.seq));
    }
    if with_seq {
        object["sequencer"] = json!(s3_sequencer(e.seq));
    }
    json!({
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2025-01-02T03:04:05.000Z",
        "eventName": if created { "ObjectCreated:Put" } else { "ObjectRemoved:Delete" },
        "s3": { "s3SchemaVersion": "1.0", "configurationId": "slate",
                "bucket": { "name": BUCKET, "arn": format!("arn:aws:s3:::{BUCKET}") },
                "object": object }
    })
}

pub(crate) fn s3_eventbridge(full_key: &str, e: &Ev, with_seq: bool) -> String {
    let created = e.kind == EvKind::Created;
    let mut object = json!({ "key": full_key, "size": e.size, "etag": format!("{:032x}", e.seq) });
    if with_seq {
        object["sequencer"] = json!(s3_sequencer(e.seq));
    }
    json!({
        "version": "0", "id": format!("ev-{}", e.seq),
        "detail-type": if created { "Object Created" } else { "Object Deleted" },
        "source": "aws.s3", "account": "111122223333", "time": "2025-01-02T03:04:05Z",
        "detail": { "version": "0", "bucket": { "name": BUCKET }, "object": object,
                    "reason": if created { "PutObject" } else { "DeleteObject" } }
    })
    .to_string()
}

pub(crate) fn sns(message: &str) -> String {
    json!({
        "Type": "Notification", "MessageId": "m-1",
        "TopicArn": "arn:aws:sns:us-east-1:111122223333:s3-events",
        "Subject": "Amazon S3 Notification", "Message": message,
        "Timestamp": "2025-01-02T03:04:05.100Z", "SignatureVersion": "1", "Signature": "EXAMPLE"
    })
    .to_string()
}

pub(crate) fn azure_event(full_key: &str, e: &Ev, cloud_events: bool) -> serde_json::Value {
    let (event_type, data) = match e.kind {
        EvKind::Created | EvKind::MetaUpdated => (
            "Microsoft.Storage.BlobCreated",
            json!({ "api": "PutBlob", "eTag": format!("\"0x8D{:X}\"", e.seq),
                    "contentLength": e.size, "blobType": "BlockBlob",
                    "url": format!("https://acct.blob.core.windows.net/{BUCKET}/{full_key}"),
                    "sequencer": format!("{:032X}", e.seq) }),
        ),
        EvKind::Deleted => (
            "Microsoft.Storage.BlobDeleted",
            json!({ "api": "DeleteBlob", "blobType": "BlockBlob",
                    "url": format!("https://acct.blob.core.windows.net/{BUCKET}/{full_key}"),
                    "sequencer": format!("{:032X}", e.seq) }),
        ),
        EvKind::DirDeleted => (
            "Microsoft.Storage.DirectoryDeleted",
            json!({ "api": "DeleteDirectory", "recursive": "true",
                    "url": format!("https://acct.dfs.core.windows.net/{BUCKET}/{full_key}"),
                    "sequencer": format!("{:032X}", e.seq) }),
        ),
    };
    let subject = match e.kind {
        // the folder of KEYS[1]
        EvKind::DirDeleted => format!(
            "/blobServices/default/containers/{BUCKET}/blobs/{}",
            full_key.rsplit_once('/').map_or("", |(d, _)| d)
        ),
        _ => format!("/blobServices/default/containers/{BUCKET}/blobs/{full_key}"),
    };
    let topic =
        "/subscriptions/s/resourceGroups/r/providers/Microsoft.Storage/storageAccounts/acct";
    if cloud_events {
        json!({ "source": topic, "subject": subject, "type": event_type,
                "time": "2025-01-02T03:04:05Z", "id": format!("id-{}", e.seq), "data": data,
                "specversion": "1.0" })
    } else {
        json!({ "topic": topic, "subject": subject, "eventType": event_type,
                "eventTime": "2025-01-02T03:04:05Z", "id": format!("id-{}", e.seq), "data": data,
                "dataVersion": "", "metadataVersion": "1" })
    }
}

/// A GCS Pub/Sub message: attributes and data (the object resource, or nothing).
pub(crate) fn gcs_message(
    full_key: &str,
    e: &Ev,
    payload: bool,
    shape: u8,
) -> (HashMap<String, String>, String) {
    let event_type = match e.kind {
        EvKind::Created => "OBJECT_FINALIZE",
        EvKind::MetaUpdated => "OBJECT_METADATA_UPDATE",
        // versioned buckets archive instead of deleting
        EvKind::Deleted | EvKind::DirDeleted if shape & 4 != 0 => "OBJECT_ARCHIVE",
        EvKind::Deleted | EvKind::DirDeleted => "OBJECT_DELETE",
    };
    let mut attrs: HashMap<String, String> = [
        (
            "notificationConfig",
            format!("projects/_/buckets/{BUCKET}/notificationConfigs/1"),
        ),
        ("eventType", event_type.to_string()),
        (
            "payloadFormat",
            if payload { "JSON_API_V1" } else { "NONE" }.to_string(),
        ),
        ("bucketId", BUCKET.to_string()),
        ("objectId", full_key.to_string()),
        ("objectGeneration", e.seq.to_string()),
        ("eventTime", "2025-01-02T03:04:05.000000Z".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(g) = e.overwrote {
        attrs.insert("overwroteGeneration".into(), g.to_string());
    }
    if let Some(g) = e.overwritten_by {
        attrs.insert("overwrittenByGeneration".into(), g.to_string());
    }
    if !payload {
        return (attrs, String::new());
    }
    // GCS writes numbers as decimal strings; fake-gcs-server writes the generation as a number
    let generation = if shape & 2 != 0 {
        json!(e.seq)
    } else {
        json!(e.seq.to_string())
    };
    let data = json!({
        "kind": "storage#object", "name": full_key, "bucket": BUCKET,
        "generation": generation, "metageneration": e.meta.to_string(),
        "size": e.size.to_string(), "etag": format!("C{:X}E{:X}", e.seq, e.meta)
    });
    (attrs, data.to_string())
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let byte = |i: usize| *c.get(i).unwrap_or(&0) as u32;
        let n = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
