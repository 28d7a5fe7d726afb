//! The type-naming acceptance program (issue #8): it holds `Vec<Foo>`,
//! `Box<Bar>`, `Rc<Baz>`, `Arc<Mutex<Qux>>`, `HashMap<String, Quux>` and
//! `Box<dyn Shape>` values of two concrete types, prints what each type
//! name should account for, and keeps everything live for the dump taken
//! at exit. Built by the tests with plain rustc in several profiles and
//! traced through the preload library.
//!
//! Output lines: `EXPECT <blocks> <exact|atleast> <bytes> <type name>`.

use std::collections::HashMap;
use std::mem::size_of;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

pub struct Foo {
    pub a: u64,
    pub b: u64,
    pub c: u32,
}
pub struct Bar {
    pub data: [u64; 16],
}
pub struct Baz {
    pub x: u64,
    pub y: [u8; 40],
}
pub struct Qux {
    pub v: [u64; 6],
}
pub struct Quux {
    pub n: u64,
    pub m: [u32; 10],
}
pub trait Shape {
    fn area(&self) -> u64;
}
pub struct Circle {
    pub r: u64,
    pub pad: [u64; 5],
}
pub struct Square {
    pub s: u64,
    pub pad: [u64; 11],
}
impl Shape for Circle {
    fn area(&self) -> u64 {
        self.r * self.r * 3 + self.pad[0]
    }
}
impl Shape for Square {
    fn area(&self) -> u64 {
        self.s * self.s + self.pad[1]
    }
}

fn expect(blocks: usize, exact: bool, bytes: usize, name: &str) {
    println!("EXPECT {blocks} {} {bytes} {name}", if exact { "exact" } else { "atleast" });
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(20000);
    let mut foos: Vec<Foo> = Vec::new();
    for i in 0..n * 4 {
        foos.push(Foo { a: i as u64, b: 2, c: 3 });
    }
    let bars: Vec<Box<Bar>> = (0..n).map(|i| Box::new(Bar { data: [i as u64; 16] })).collect();
    let bazs: Vec<Rc<Baz>> = (0..n).map(|i| Rc::new(Baz { x: i as u64, y: [1; 40] })).collect();
    let quxs: Vec<Arc<Mutex<Qux>>> = (0..n).map(|i| Arc::new(Mutex::new(Qux { v: [i as u64; 6] }))).collect();
    let mut map: HashMap<String, Quux> = HashMap::new();
    for i in 0..n {
        map.insert(format!("key-{i}"), Quux { n: i as u64, m: [0; 10] });
    }
    let mut shapes: Vec<Box<dyn Shape>> = Vec::new();
    for i in 0..n {
        if i % 2 == 0 {
            shapes.push(Box::new(Circle { r: i as u64, pad: [0; 5] }));
        } else {
            shapes.push(Box::new(Square { s: i as u64, pad: [0; 11] }));
        }
    }
    let total: u64 = shapes.iter().map(|s| s.area()).sum::<u64>()
        + foos.iter().map(|f| f.a + f.b + f.c as u64).sum::<u64>()
        + bars.iter().map(|b| b.data[0]).sum::<u64>()
        + bazs.iter().map(|b| b.x + b.y[0] as u64).sum::<u64>()
        + quxs.iter().map(|q| q.lock().map(|g| g.v[0]).unwrap_or(0)).sum::<u64>()
        + map.values().map(|q| q.n + q.m[0] as u64).sum::<u64>();
    println!("TOTAL {total}");

    let counts = 2 * size_of::<usize>();
    expect(1, true, foos.capacity() * size_of::<Foo>(), "Vec<types::Foo>");
    expect(1, true, bars.capacity() * size_of::<Box<Bar>>(), "Vec<Box<types::Bar>>");
    expect(n, true, n * size_of::<Bar>(), "Box<types::Bar>");
    expect(1, true, bazs.capacity() * size_of::<Rc<Baz>>(), "Vec<Rc<types::Baz>>");
    expect(n, true, n * (counts + size_of::<Baz>()), "Rc<types::Baz>");
    expect(1, true, quxs.capacity() * size_of::<Arc<Mutex<Qux>>>(), "Vec<Arc<Mutex<types::Qux>>>");
    expect(n, true, n * (counts + size_of::<Mutex<Qux>>()), "Arc<Mutex<types::Qux>>");
    expect(1, false, map.capacity() * size_of::<(String, Quux)>(), "HashMap<String, types::Quux>");
    expect(n, false, map.keys().map(|k| k.len()).sum(), "String");
    expect(1, true, shapes.capacity() * 2 * size_of::<usize>(), "Vec<Box<dyn types::Shape>>");
    expect(n.div_ceil(2), true, n.div_ceil(2) * size_of::<Circle>(), "Box<types::Circle>");
    expect(n / 2, true, n / 2 * size_of::<Square>(), "Box<types::Square>");
    // Keep everything live for the dump taken at exit.
    std::mem::forget((foos, bars, bazs, quxs, map, shapes));
}
