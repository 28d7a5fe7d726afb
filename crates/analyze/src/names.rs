//! Reading demangled names: bracket levels and a C++ function's qualified
//! name, shared by the symbolizer, the type namer and the DWARF reader.

/// Each byte of `s` with its bracket level: `<`, `(` and `[` open, `>`,
/// `)` and `]` close, a bracket itself standing at the outer level; the
/// `>` of `->` (`fn() -> T`) is no bracket. An unbalanced closer takes the
/// level below zero.
pub(crate) fn levels(s: &str) -> impl Iterator<Item = (usize, u8, i32)> + '_ {
    let b = s.as_bytes();
    let mut depth = 0i32;
    b.iter().enumerate().map(move |(i, &c)| match c {
        b'<' | b'(' | b'[' => {
            depth += 1;
            (i, c, depth - 1)
        }
        b'>' if i > 0 && b[i - 1] == b'-' => (i, c, depth),
        b'>' | b')' | b']' => {
            depth -= 1;
            (i, c, depth)
        }
        _ => (i, c, depth),
    })
}

/// The qualified name of a demangled C++ function, without the return
/// type a template's demangling starts with (`void std::vector<P>::f(P)`
/// → `std::vector<P>::f(P)`); other names are returned as they are.
pub(crate) fn cxx_qualified_name(name: &str) -> &str {
    let mut depth = 0i32;
    let mut last_space = None;
    for (i, c) in name.char_indices() {
        match c {
            '<' | '[' => depth += 1,
            '>' | ']' => depth -= 1,
            '(' => break,
            ' ' if depth == 0 => last_space = Some(i),
            _ => {}
        }
    }
    match last_space {
        Some(i) => &name[i + 1..],
        None => name,
    }
}
