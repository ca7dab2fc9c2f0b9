pub mod collector;
pub mod jaeger;
pub mod prometheus;
pub mod records;
pub mod tool;
