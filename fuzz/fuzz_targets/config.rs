//! TOML config text into `Config::parse` and `Config::validate`: no panic, and an error is one
//! line naming the file, with no control character (they are shown escaped).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let got = slate::config::Config::parse(&text, "fuzz.toml")
        .and_then(|c| c.validate("fuzz.toml").map(|()| c));
    if let Err(e) = got {
        let shown = e.to_string();
        assert!(shown.starts_with("config fuzz.toml: "), "{shown}");
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
});
