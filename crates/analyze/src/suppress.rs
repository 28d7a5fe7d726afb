//! Leak suppressions, in the two formats users already keep: valgrind's
//! (`{ name, Memcheck:Leak, match-leak-kinds: …, fun:/obj: frames, ... }`)
//! and LeakSanitizer's (`leak:PATTERN` lines). A lost group whose
//! allocation stack matches one is counted apart, as valgrind's
//! "suppressed", and each suppression says how often it matched, so that
//! those that match nothing can be reported.

use crate::leaks::LeakKind;
use crate::symbols::Frame;

/// A suppression file that cannot be used: the line and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct SuppressionError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong there.
    pub what: String,
}

/// One frame line of a valgrind suppression.
#[derive(Clone, Debug, PartialEq)]
enum FramePattern {
    /// `fun:PATTERN`: the function's (demangled) name.
    Fun(String),
    /// `obj:PATTERN`: the object's path.
    Obj(String),
    /// `...`: any number of frames, none included.
    Any,
}

/// One suppression.
#[derive(Clone, Debug, PartialEq)]
pub struct Suppression {
    /// Its name (valgrind's first line; the pattern for LeakSanitizer's).
    pub name: String,
    /// The leak kinds it applies to (valgrind's `match-leak-kinds`; empty:
    /// every lost kind).
    kinds: Vec<LeakKind>,
    how: Matcher,
}

#[derive(Clone, Debug, PartialEq)]
enum Matcher {
    /// valgrind: the stack from its innermost frame.
    Frames(Vec<FramePattern>),
    /// LeakSanitizer: a function or object anywhere in the stack.
    Anywhere(String),
    /// A suppression of another error than a leak.
    Never,
}

/// A set of suppressions and how often each matched.
#[derive(Clone, Debug, Default)]
pub struct Suppressions {
    list: Vec<Suppression>,
    used: Vec<u64>,
}

/// valgrind's and LeakSanitizer's wildcards: `*` any run of characters,
/// `?` one character; the whole text must match.
pub fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // Iterative matcher with one backtrack point (the last `*`).
    let (mut i, mut j, mut star, mut mark) = (0usize, 0usize, usize::MAX, 0usize);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = i;
            mark = j;
            i += 1;
        } else if star != usize::MAX {
            i = star + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

impl Suppressions {
    /// Parses a file in either format (or both: LeakSanitizer lines outside
    /// valgrind's braces). `#` starts a comment line.
    pub fn parse(text: &str) -> Result<Suppressions, SuppressionError> {
        let mut list = Vec::new();
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        while let Some((n, line)) = lines.next() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(p) = line.strip_prefix("leak:") {
                let p = p.trim();
                if p.is_empty() {
                    return Err(SuppressionError { line: n, what: "empty leak: pattern".into() });
                }
                list.push(Suppression { name: p.to_string(), kinds: vec![], how: Matcher::Anywhere(p.to_string()) });
                continue;
            }
            if line != "{" {
                return Err(SuppressionError {
                    line: n,
                    what: format!("expected '{{' (a valgrind suppression) or 'leak:PATTERN' (LeakSanitizer), found {line:?}"),
                });
            }
            let err = |line: usize, what: &str| SuppressionError { line, what: what.to_string() };
            let (_, name) = lines.next().ok_or_else(|| err(n, "unterminated suppression"))?;
            let (kn, kind) = lines.next().ok_or_else(|| err(n, "unterminated suppression"))?;
            let mut frames = Vec::new();
            let mut kinds = Vec::new();
            let leak = kind.ends_with(":Leak");
            if !kind.contains(':') {
                return Err(err(kn, "expected TOOL:KIND (Memcheck:Leak) after the name"));
            }
            loop {
                let (ln, l) = lines.next().ok_or_else(|| err(n, "unterminated suppression (no '}')"))?;
                if l == "}" {
                    break;
                }
                if let Some(k) = l.strip_prefix("match-leak-kinds:") {
                    for k in k.split(',').map(str::trim) {
                        match k {
                            "definite" => kinds.push(LeakKind::DefinitelyLost),
                            "indirect" => kinds.push(LeakKind::IndirectlyLost),
                            "possible" => kinds.push(LeakKind::PossiblyLost),
                            "reachable" => kinds.push(LeakKind::StillReachable),
                            "all" => kinds.extend([
                                LeakKind::DefinitelyLost,
                                LeakKind::IndirectlyLost,
                                LeakKind::PossiblyLost,
                                LeakKind::StillReachable,
                            ]),
                            other => return Err(err(ln, &format!("unknown leak kind {other:?}"))),
                        }
                    }
                } else if l == "..." {
                    frames.push(FramePattern::Any);
                } else if let Some(f) = l.strip_prefix("fun:") {
                    frames.push(FramePattern::Fun(f.to_string()));
                } else if let Some(o) = l.strip_prefix("obj:") {
                    frames.push(FramePattern::Obj(o.to_string()));
                } else if l.starts_with("src:") {
                    // valgrind 3.20's `src:file:line`: not matched by us;
                    // read as "a frame".
                    frames.push(FramePattern::Fun("*".into()));
                } else {
                    return Err(err(ln, &format!("expected fun:, obj:, ..., match-leak-kinds: or '}}', found {l:?}")));
                }
            }
            // Suppressions of other errors (Memcheck:Cond, Helgrind…) are
            // read and never match a leak.
            let how = if leak { Matcher::Frames(frames) } else { Matcher::Never };
            list.push(Suppression { name: name.to_string(), kinds, how });
        }
        let used = vec![0; list.len()];
        Ok(Suppressions { list, used })
    }

    /// Adds the suppressions of another file after these.
    pub fn extend(&mut self, more: Suppressions) {
        self.list.extend(more.list);
        self.used.extend(more.used);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The first suppression that matches a group of `kind` allocated at
    /// `frames` (innermost first, starting at the allocation function),
    /// counted as used.
    pub fn matching(&mut self, kind: LeakKind, frames: &[Frame]) -> Option<&Suppression> {
        let i = self.list.iter().position(|s| (s.kinds.is_empty() || s.kinds.contains(&kind)) && s.matches(frames))?;
        self.used[i] += 1;
        Some(&self.list[i])
    }

    /// The suppressions that matched nothing, by name.
    pub fn unused(&self) -> Vec<String> {
        self.list.iter().zip(&self.used).filter(|(_, &n)| n == 0).map(|(s, _)| s.name.clone()).collect()
    }

    /// How often each suppression matched, by name, in file order.
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.list.iter().zip(&self.used).map(|(s, &n)| (s.name.clone(), n)).collect()
    }
}

impl Suppression {
    fn matches(&self, frames: &[Frame]) -> bool {
        match &self.how {
            Matcher::Anywhere(p) => frames.iter().any(|f| sanitizer_match(p, f)),
            Matcher::Frames(pats) => frames_match(pats, frames),
            Matcher::Never => false,
        }
    }
}

/// LeakSanitizer's rule: the pattern (with `*`, and `^`/`$` anchors) is
/// found in the function's name or the module's path.
fn sanitizer_match(p: &str, f: &Frame) -> bool {
    let (start, p) = match p.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, p),
    };
    let (end, p) = match p.strip_suffix('$') {
        Some(rest) => (true, rest),
        None => (false, p),
    };
    let pat = format!("{}{p}{}", if start { "" } else { "*" }, if end { "" } else { "*" });
    f.function.as_deref().is_some_and(|n| wildcard(&pat, n)) || f.module.as_deref().is_some_and(|m| wildcard(&pat, m))
}

/// valgrind's rule: the patterns match the stack from its innermost frame,
/// `...` standing for any number of frames; the stack may go on after the
/// last pattern.
///
/// Decided from the last pattern back, one pass over the stack per pattern
/// (`ok[j]`: the patterns after this one match the stack from frame `j`):
/// trying every split at each `...` instead costs exponential time in the
/// number of `...` lines: seconds for a dozen of them against a stack of
/// 32 frames, days for twenty.
fn frames_match(pats: &[FramePattern], frames: &[Frame]) -> bool {
    let n = frames.len();
    // No pattern left: matches whatever remains of the stack.
    let mut ok = vec![true; n + 1];
    for p in pats.iter().rev() {
        let mut here = vec![false; n + 1];
        match p {
            FramePattern::Any => {
                let mut later = false;
                for j in (0..=n).rev() {
                    later |= ok[j];
                    here[j] = later;
                }
            }
            FramePattern::Fun(pat) => {
                for (j, f) in frames.iter().enumerate() {
                    here[j] = ok[j + 1] && f.function.as_deref().is_some_and(|name| wildcard(pat, name) || wildcard(pat, plain_name(name)));
                }
            }
            FramePattern::Obj(pat) => {
                for (j, f) in frames.iter().enumerate() {
                    here[j] = ok[j + 1] && f.module.as_deref().is_some_and(|m| wildcard(pat, m));
                }
            }
        }
        ok = here;
    }
    ok[0]
}

/// A demangled C++ name without its parameter list (`f(int)` → `f`), as
/// valgrind's `fun:` lines name functions.
fn plain_name(n: &str) -> &str {
    match n.find('(') {
        Some(i) if i > 0 => &n[..i],
        _ => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, module: &str) -> Frame {
        Frame { address: 0, function: Some(function.into()), file: None, line: None, module: Some(module.into()), ..Default::default() }
    }

    #[test]
    fn wildcards_match_as_valgrind_says() {
        assert!(wildcard("mal*", "malloc"));
        assert!(wildcard("*alloc", "xmalloc"));
        assert!(wildcard("m?lloc", "malloc"));
        assert!(wildcard("*", ""));
        assert!(!wildcard("malloc", "xmalloc"));
        assert!(!wildcard("m?lloc", "mlloc"));
        assert!(wildcard("*lib*.so*", "/usr/lib/x86_64-linux-gnu/libfoo.so.1"));
    }

    #[test]
    fn both_formats_parse_and_match() {
        let s = Suppressions::parse(
            "# a comment\n\
             {\n   my-leak\n   Memcheck:Leak\n   match-leak-kinds: definite\n   fun:malloc\n   ...\n   fun:make_*\n}\n\
             leak:libcrypto\n\
             {\n   cond\n   Memcheck:Cond\n   fun:strlen\n}\n",
        )
        .unwrap();
        let stack = [frame("malloc", "/lib/libc.so.6"), frame("helper", "/bin/p"), frame("make_node", "/bin/p"), frame("main", "/bin/p")];
        let mut s = s;
        assert_eq!(s.matching(LeakKind::DefinitelyLost, &stack).map(|x| x.name.clone()), Some("my-leak".into()));
        // match-leak-kinds: definite only.
        assert!(s.matching(LeakKind::PossiblyLost, &stack).is_none());
        let crypto = [frame("malloc", "/lib/libc.so.6"), frame("CRYPTO_malloc", "/usr/lib/libcrypto.so.3")];
        assert_eq!(s.matching(LeakKind::PossiblyLost, &crypto).map(|x| x.name.clone()), Some("libcrypto".into()));
        assert_eq!(s.unused(), vec!["cond".to_string()]);
        // A stack the frames do not start like is not matched.
        let other = [frame("calloc", "/lib/libc.so.6"), frame("make_node", "/bin/p")];
        let mut fresh = Suppressions::parse("{\n x\n Memcheck:Leak\n fun:malloc\n fun:make_node\n}\n").unwrap();
        assert!(fresh.matching(LeakKind::DefinitelyLost, &other).is_none());
    }

    #[test]
    fn many_any_frame_lines_against_a_deep_stack_are_decided_at_once() {
        // Found by the `suppressions` fuzz target: tried split by split,
        // twenty `...` lines before a frame that never matches take over
        // 10^13 steps against a 32-frame stack (the test would not end).
        let stack: Vec<Frame> = (0..32).map(|i| frame(&format!("f{i}"), "/bin/p")).collect();
        let dots = " ...\n".repeat(20);
        let mut s = Suppressions::parse(&format!("{{\n n\n Memcheck:Leak\n{dots} obj:/nowhere\n}}\n")).unwrap();
        assert!(s.matching(LeakKind::DefinitelyLost, &stack).is_none());
        // The same with a frame that is there: matched wherever it is.
        let mut s = Suppressions::parse(&format!("{{\n n\n Memcheck:Leak\n{dots} fun:f31\n}}\n")).unwrap();
        assert!(s.matching(LeakKind::DefinitelyLost, &stack).is_some());
        let mut s = Suppressions::parse(&format!("{{\n n\n Memcheck:Leak\n fun:f0\n{dots} fun:f3\n ...\n fun:f31\n}}\n")).unwrap();
        assert!(s.matching(LeakKind::DefinitelyLost, &stack).is_some());
        // Patterns past the stack's end do not match; `...` may stand for none.
        let mut s = Suppressions::parse("{\n n\n Memcheck:Leak\n fun:f30\n fun:f31\n fun:f32\n}\n").unwrap();
        assert!(s.matching(LeakKind::DefinitelyLost, &stack[30..]).is_none());
        let mut s = Suppressions::parse("{\n n\n Memcheck:Leak\n fun:f30\n ...\n fun:f31\n ...\n}\n").unwrap();
        assert!(s.matching(LeakKind::DefinitelyLost, &stack[30..]).is_some());
    }

    #[test]
    fn bad_files_say_where() {
        for (text, line) in [("{\n name\n", 1), ("bogus\n", 1), ("{\n n\n Memcheck:Leak\n fun:x\n whatever\n}\n", 5), ("leak:\n", 1)] {
            let e = Suppressions::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
        }
    }
}
