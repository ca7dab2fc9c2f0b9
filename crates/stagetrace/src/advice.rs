//! The API a warning's "Fix:" names: the Rust builder's methods, or the
//! Python package's arguments when the layer runs under the Python
//! bindings (a Python user cannot call `.queue_capacity(...)`).

/// Which API the layer's warnings name in their fixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdviceFor {
    /// `StageLayer::builder()` methods and `tracing` spans (the default).
    #[default]
    Rust,
    /// `stagetrace.init(...)` arguments and `with stagetrace.call()` /
    /// `stagetrace.stage(...)` blocks.
    Python,
}

impl AdviceFor {
    /// How to make the queue to the worker longer.
    pub(crate) fn raise_queue(self) -> &'static str {
        match self {
            AdviceFor::Rust => "raise .queue_capacity(...)",
            AdviceFor::Python => "raise queue_capacity= in stagetrace.init(...)",
        }
    }

    /// Where to write the record and summary files instead.
    pub(crate) fn output_dir(self) -> &'static str {
        match self {
            AdviceFor::Rust => "pass another .output_dir(...)",
            AdviceFor::Python => "pass another output_dir to stagetrace.init(...)",
        }
    }

    /// How to put stage timings inside a call.
    pub(crate) fn open_call(self) -> &'static str {
        match self {
            AdviceFor::Rust => {
                "open a `call` span around each control cycle (or set .call_span_name(...))"
            }
            AdviceFor::Python => "time each control cycle inside `with stagetrace.call():`",
        }
    }

    /// How to name a call's stages so they count.
    pub(crate) fn name_stages(self) -> &'static str {
        match self {
            AdviceFor::Rust => {
                "name the stage spans capture / transport / infer / dispatch, add a `stage` \
                 field, or map your names with .map_span(...)"
            }
            AdviceFor::Python => {
                "time stages with `with stagetrace.stage(\"capture\")` (capture / transport / \
                 infer / dispatch), or map your names with stages={...} in stagetrace.init(...)"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_advice_names_no_rust_builder_method() {
        let p = AdviceFor::Python;
        for text in [
            p.raise_queue(),
            p.open_call(),
            p.name_stages(),
            p.output_dir(),
        ] {
            assert!(
                !text.contains(".queue_capacity(")
                    && !text.contains(".output_dir(")
                    && !text.contains(".map_span(")
                    && !text.contains(".call_span_name("),
                "{text}"
            );
            assert!(text.contains("stagetrace."), "{text}");
        }
    }
}
