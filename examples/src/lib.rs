//! Runnable examples for batchbridge live beside this crate (`cargo run --example quickstart`
//! from the workspace root). The crate itself holds what the benchmarks share
//! ([`bench`](mod@bench)) and compiles the README's Rust examples as doctests, so they
//! cannot go stale.

pub mod bench;

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
