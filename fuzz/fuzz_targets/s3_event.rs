//! SQS message bodies of S3 events (raw, SNS-wrapped, EventBridge) into `parse_s3`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // SQS hands slate a string: bytes that are not UTF-8 arrive replaced
    let body = String::from_utf8_lossy(data);
    slate_fuzz::check(slate::events::parse_s3(&body));
});
