//! GCS Pub/Sub messages: the input split into attributes and data (`name=value` lines, a blank
//! line, the data bytes) into `parse_gcs`, and the whole input as a push body into
//! `parse_gcs_push`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (attributes, payload) = slate_fuzz::split_gcs(data);
    slate_fuzz::check(slate::events::parse_gcs(&attributes, &payload));
    slate_fuzz::check(slate::events::parse_gcs_push(&String::from_utf8_lossy(
        data,
    )));
});
