//! Feeds arbitrary bytes, as a connection to `heapdump serve` sends them,
//! to the viewer's request framing: it must never panic, never take a
//! request longer than what arrived or than the limits allow, wait for
//! more only while a request could still fit, and refuse only with the
//! statuses the README lists.
#![no_main]

#[path = "../../crates/cli/src/request.rs"]
#[allow(dead_code)]
mod request;

use libfuzzer_sys::fuzz_target;
use request::{Parse, Request, MAX_BODY, MAX_HEAD, MAX_LINE};

fuzz_target!(|data: &[u8]| {
    match Request::parse(data) {
        Parse::Whole(r, len) => {
            assert!(len <= data.len() && len <= MAX_HEAD + MAX_BODY, "a request of {len} bytes out of {}", data.len());
            assert!(data[..len].windows(r.target.len()).any(|w| w == r.target.as_bytes()), "the target is in the request");
            // The request is the same whatever follows it.
            match Request::parse(&data[..len]) {
                Parse::Whole(again, n) => {
                    assert_eq!((again.method, again.target, again.host, again.close, n), (r.method, r.target, r.host, r.close, len))
                }
                _ => panic!("the request alone is not the same request"),
            }
        }
        // The connection holds at most a whole request before it is
        // answered or refused.
        Parse::Partial => assert!(data.len() < MAX_HEAD + MAX_BODY, "still waiting after {} bytes", data.len()),
        Parse::Refused(status, why) => {
            assert!(matches!(status, 400 | 411 | 413 | 414 | 431), "status {status}");
            assert!(!why.is_empty());
            if status == 414 {
                assert!(data.len() > MAX_LINE);
            }
        }
    }
});
