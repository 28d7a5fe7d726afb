//! Integration tests of the format: round trips, damage, fuzz corpus.

mod corpus;
mod damage;
mod model;
mod roundtrip;
