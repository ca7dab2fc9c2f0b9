pub mod collector;
pub mod jaeger;
