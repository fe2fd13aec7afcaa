//! The layers, checked: each module below may use only the modules under it.
//!
//! ```text
//! server ─▶ session ─▶ planner ─▶ stream ─▶ state ─▶ dataflow
//!                 └──────────────▶ connectors ─┘
//! ```
//!
//! `dataflow` (chunks, messages, key routing) is what `state` and `stream` share;
//! `state` never reaches into the runtime, the runtime never into the catalog, the
//! planner or the session; the planner never into the session; the session never into
//! the server. A test reads the sources (test code aside) and fails on an import that
//! crosses a layer the wrong way.

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `.rs` file under `dir`, with its text up to its unit tests.
    fn sources(dir: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).expect("source directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                out.extend(sources(&path));
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source file");
                let code = match text.find("#[cfg(test)]") {
                    Some(at) => text[..at].to_string(),
                    None => text,
                };
                out.push((path.display().to_string(), code));
            }
        }
        out
    }

    #[test]
    fn no_module_reaches_into_a_layer_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        // Each layer may use those before it, never those after it.
        let layers = [
            "dataflow", "state", "stream", "planner", "session", "server",
        ];
        // Nor, below the planner, the catalog (and, below the runtime, the connectors).
        let also = |layer: &str| -> &[&str] {
            match layer {
                "dataflow" | "state" => &["catalog", "connectors"],
                "stream" => &["catalog"],
                _ => &[],
            }
        };
        let rules: Vec<(&str, Vec<&str>)> = layers
            .iter()
            .enumerate()
            .map(|(i, layer)| {
                let mut above: Vec<&str> = layers[i + 1..].to_vec();
                above.extend_from_slice(also(layer));
                (*layer, above)
            })
            .collect();
        let mut crossings = Vec::new();
        for (layer, above) in &rules {
            for (file, code) in sources(&src.join(layer)) {
                for module in above {
                    if code.contains(&format!("crate::{module}::"))
                        || code.contains(&format!("crate::{module};"))
                        || code.contains(&format!("crate::{module}}}"))
                    {
                        crossings.push(format!("{file} uses crate::{module}"));
                    }
                }
            }
        }
        assert!(crossings.is_empty(), "layers crossed: {crossings:#?}");
    }
}
