//! Examples live in `examples/`; run them with `cargo run -p examples --example NAME`.
