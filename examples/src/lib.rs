//! Examples live in `examples/`; run them with `cargo run -p examples --example NAME`.
//!
//! This crate is also where the docs' Rust snippets are tested: every
//! ` ```rust ` block of `README.md` and `docs/*.md` is a doctest of an item
//! of the module `docs` (made by `build.rs`), so `cargo test -p examples
//! --doc` compiles each block as written and runs those not marked `no_run`
//! (which need a collector, a robot or a server that runs until stopped).
//! Hidden `# ` lines only supply what a partial block leaves to the reader.

/// One item per fenced Rust block of `README.md` and `docs/*.md`, made by
/// `build.rs` and named after its file and line.
#[cfg(doctest)]
pub mod docs {
    include!(concat!(env!("OUT_DIR"), "/doc_snippets.rs"));
}
