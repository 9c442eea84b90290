//! Event Grid deliveries (webhook bodies, and Storage Queue messages through
//! `decode_queue_message`) into `parse_eventgrid`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slate::events::{decode_queue_message, parse_eventgrid};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    slate_fuzz::check(parse_eventgrid(&text));
    match decode_queue_message(&text) {
        Ok(json) => slate_fuzz::check(parse_eventgrid(&json)),
        Err(e) => assert!(!e.reason.contains('\n'), "{e}"),
    }
});
