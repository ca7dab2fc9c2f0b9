//! Turns every fenced ` ```rust ` block of `README.md` and `docs/*.md` into a
//! doctest of this crate (`src/lib.rs`, module `docs`): one item per block,
//! named after its file and line (`jaeger_md_line_96`), so
//! `cargo test -p examples --doc` compiles each block as written, runs those
//! not marked `no_run`, and a failure names the block.
//!
//! Why not `#[doc = include_str!("../README.md")]`: rustdoc would also
//! compile every indented block (a table, a formula, a shell line indented
//! four spaces) and every fence without a language as Rust, and the docs are
//! full of those. Only blocks whose info string starts with `rust` are taken.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    // The manifest's folder when the script runs, not when it was built: a
    // target folder shared by several checkouts (git worktrees) reuses one
    // build of this script, which must read the docs of the checkout it
    // runs for.
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("..");
    let mut files = vec![root.join("README.md")];
    let docs = root.join("docs");
    println!("cargo:rerun-if-changed={}", docs.display());
    let mut found: Vec<PathBuf> = std::fs::read_dir(&docs)
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    files.extend(found);

    let mut out = String::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .into_owned();
        for block in rust_blocks(&text) {
            let ident = format!(
                "{}_line_{}",
                name.trim_start_matches("docs/")
                    .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                    .to_lowercase(),
                block.line
            );
            let doc = format!("```{}\n{}```", block.info, block.code);
            let _ = writeln!(
                out,
                "/// `{name}`, the block at line {}.\n#[doc = {doc:?}]\n#[allow(non_camel_case_types)]\npub struct {ident};\n",
                block.line
            );
        }
    }
    let dest =
        PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default()).join("doc_snippets.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}

/// A fenced Rust block: where it starts, its info string, its lines.
struct Block {
    line: usize,
    info: String,
    code: String,
}

/// The fenced blocks whose info string is `rust` or starts with `rust,`
/// (`rust,no_run`, `rust,ignore`), in order. Fences may be indented (inside
/// a list item): the indentation of the opening fence is removed from the
/// block's lines.
fn rust_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((i + 1, indent, info.trim().to_owned(), String::new()));
                }
            }
            Some((start, fence_indent, info, code)) => {
                if trimmed.starts_with("```") {
                    let is_rust = info == "rust" || info.starts_with("rust,");
                    if is_rust {
                        blocks.push(Block {
                            line: *start,
                            info: std::mem::take(info),
                            code: std::mem::take(code),
                        });
                    }
                    open = None;
                } else {
                    let cut = indent.min(*fence_indent);
                    code.push_str(&line[cut..]);
                    code.push('\n');
                }
            }
        }
    }
    blocks
}
