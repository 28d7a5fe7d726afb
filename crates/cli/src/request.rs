//! The viewer's request framing: where the request at the start of what a
//! connection sent ends (head and body), and which requests are refused
//! before anything looks at them, by size or because they are ambiguous.
//!
//! It stands alone (only `httparse`, nothing else of the command) because
//! it reads bytes from any process on the machine: the fuzz target
//! `viewer_request` (fuzz/) includes this file by path, a fuzz target being
//! unable to link a module of a binary.

/// The longest request line (method, target, version), as nginx's 8 KiB
/// header buffers: beyond, 414.
pub const MAX_LINE: usize = 8 * 1024;
/// The longest request head, request line and header fields: beyond, 431.
pub const MAX_HEAD: usize = 16 * 1024;
/// The most header fields of one request: beyond, 431.
pub const MAX_HEADERS: usize = 64;
/// The longest request body (the viewer takes none; a small one is passed
/// over): beyond, 413.
pub const MAX_BODY: usize = 8 * 1024;

/// A whole request head, as far as the viewer looks at it.
pub struct Request<'a> {
    /// The method, as sent.
    pub method: &'a str,
    /// The request target, path and query, as sent.
    pub target: &'a str,
    /// The one `Host` field; none when absent, repeated or not text.
    pub host: Option<&'a str>,
    /// Close the connection after the answer.
    pub close: bool,
}

/// What the bytes received so far make.
pub enum Parse<'a> {
    /// Not yet a whole request, and not too large yet.
    Partial,
    /// A request and its length, body included.
    Whole(Request<'a>, usize),
    /// A request refused before it is looked at, with the status and
    /// why: the connection closes.
    Refused(u16, String),
}

impl<'a> Request<'a> {
    /// Frames the request at the start of `input`: never reads past it,
    /// never panics, whatever the bytes.
    pub fn parse(input: &'a [u8]) -> Parse<'a> {
        let line = input.iter().position(|&b| b == b'\n');
        if line.map_or(input.len(), |n| n + 1) > MAX_LINE {
            return Parse::Refused(414, format!("the request line is longer than {} KiB", MAX_LINE / 1024));
        }
        let too_large = || {
            Parse::Refused(431, format!("the request head is longer than {} KiB or has more than {MAX_HEADERS} fields", MAX_HEAD / 1024))
        };
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut fields);
        let head = match req.parse(input) {
            Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => n,
            Ok(httparse::Status::Partial) if input.len() <= MAX_HEAD => return Parse::Partial,
            Ok(_) | Err(httparse::Error::TooManyHeaders) => return too_large(),
            Err(e) => return Parse::Refused(400, format!("a malformed request: {e}")),
        };
        let field = |name: &'static str| req.headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        if field("Transfer-Encoding").next().is_some() {
            return Parse::Refused(411, "a request body needs a Content-Length".into());
        }
        let mut lengths = field("Content-Length");
        let body = match (lengths.next(), lengths.next()) {
            (None, _) => 0,
            // Digits too many to count are too many for the viewer.
            (Some(v), None) if !v.is_empty() && v.iter().all(u8::is_ascii_digit) => {
                std::str::from_utf8(v).ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(u64::MAX)
            }
            (Some(_), None) => return Parse::Refused(400, "a malformed Content-Length".into()),
            _ => return Parse::Refused(400, "more than one Content-Length".into()),
        };
        if body > MAX_BODY as u64 {
            return Parse::Refused(413, format!("the request body is longer than {} KiB", MAX_BODY / 1024));
        }
        let len = head + body as usize;
        if input.len() < len {
            return Parse::Partial;
        }
        let mut hosts = field("Host");
        let host = match (hosts.next(), hosts.next()) {
            (Some(h), None) => std::str::from_utf8(h).ok(),
            _ => None,
        };
        let connection = |token: &str| {
            field("Connection").any(|v| v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes())))
        };
        // HTTP/1.1 keeps the connection unless told; 1.0 closes it unless told.
        let close = if req.version == Some(1) { connection("close") } else { !connection("keep-alive") };
        let (Some(method), Some(target)) = (req.method, req.path) else {
            return Parse::Refused(400, "a malformed request".into());
        };
        Parse::Whole(Request { method, target, host, close }, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status a request gets: 0 while partial, 200 when whole.
    fn verdict(p: Parse) -> u16 {
        match p {
            Parse::Refused(status, _) => status,
            Parse::Partial => 0,
            Parse::Whole(..) => 200,
        }
    }

    #[test]
    fn requests_are_framed_and_ambiguous_ones_refused() {
        // A body is part of the request; what follows is the next one.
        let next = b"GET /b HTTP/1.1\r\n\r\n";
        let two = [&b"GET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"[..], next].concat();
        let first = two.len() - next.len();
        let Parse::Whole(r, len) = Request::parse(&two) else { panic!("not whole") };
        assert_eq!((r.target, r.host, r.close, len), ("/a", Some("h"), false, first));
        assert!(matches!(Request::parse(&two[..first - 1]), Parse::Partial), "the body is awaited");
        // HTTP/1.0 closes unless asked; 1.1 keeps unless asked.
        let Parse::Whole(r, _) = Request::parse(b"GET / HTTP/1.0\r\n\r\n") else { panic!() };
        assert!(r.close);
        let Parse::Whole(r, _) = Request::parse(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n") else { panic!() };
        assert!(r.close);
        // Two lengths or two hosts are not guessed between.
        assert_eq!(verdict(Request::parse(b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab")), 400);
        assert_eq!(verdict(Request::parse(b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n")), 400);
        assert_eq!(verdict(Request::parse(b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")), 413);
        let Parse::Whole(r, _) = Request::parse(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") else { panic!() };
        assert_eq!(r.host, None);
        // The limits, at their edges.
        let line = |n: usize| format!("GET /{} HTTP/1.1\r\n", "a".repeat(n - 16));
        assert_eq!(line(MAX_LINE).len(), MAX_LINE);
        assert_eq!(verdict(Request::parse(line(MAX_LINE).as_bytes())), 0);
        assert_eq!(verdict(Request::parse(line(MAX_LINE + 1).as_bytes())), 414);
        let fields = |n: usize| format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(n));
        assert_eq!(verdict(Request::parse(fields(MAX_HEADERS).as_bytes())), 200);
        assert_eq!(verdict(Request::parse(fields(MAX_HEADERS + 1).as_bytes())), 431);
    }
}
