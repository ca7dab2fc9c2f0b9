//! The `stagetrace` command.

fn main() {}
