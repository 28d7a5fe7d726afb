//! An address in the dumped program, as the answers carry it: a `u64`,
//! never a string. It is written `0x…` only where an answer is shown: its
//! [`Display`](std::fmt::Display) for text, its `Serialize` for the JSON
//! documents (the `"0x…"` strings of `retained --json`, `path --json`,
//! the viewer's routes), so that an export or a view that needs the
//! number reads it, rather than parsing the string back.

use serde::{Serialize, Serializer};

/// An address in the dumped program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Address(pub u64);

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl Serialize for Address {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl From<u64> for Address {
    fn from(a: u64) -> Address {
        Address(a)
    }
}
