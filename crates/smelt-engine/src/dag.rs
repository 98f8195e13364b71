//! The order flows run in: a flow that reads a table another flow writes runs after it.

use smelt_spec::Flow;

use crate::{EngineError, Result};

/// `flows` in dependency order: a flow whose `from` is another selected flow's `into`
/// runs after it (the downstream flow then reads the upstream table's change feed), and a
/// flow reading files below an export flow's folder runs after the export.
/// Otherwise file order is kept. A cycle is an error naming its flows.
pub fn run_order<'a>(flows: &[&'a Flow]) -> Result<Vec<&'a Flow>> {
    let upstream: Vec<Vec<usize>> = flows
        .iter()
        .map(|f| {
            flows
                .iter()
                .enumerate()
                .filter(|(_, g)| {
                    (f.reads().is_some() && f.reads() == g.writes()) || f.reads_files_of(g)
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let mut done = vec![false; flows.len()];
    let mut order = Vec::with_capacity(flows.len());
    while order.len() < flows.len() {
        // The first flow (in file order) whose upstream flows have all run.
        let Some(next) =
            (0..flows.len()).find(|&i| !done[i] && upstream[i].iter().all(|&u| done[u]))
        else {
            let stuck: Vec<&str> = (0..flows.len())
                .filter(|&i| !done[i])
                .map(|i| flows[i].name.as_str())
                .collect();
            return Err(EngineError::user(
                format!(
                    "flows {} read each other's tables in a cycle",
                    stuck
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "a flow cannot read a table that depends on its own output; point `from:` at the table upstream",
            ));
        };
        done[next] = true;
        order.push(flows[next]);
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use smelt_spec::Pipeline;

    use super::*;

    fn pipeline(flows: &[(&str, &str, &str)]) -> Pipeline {
        let mut yaml = String::from("lake: l\nflows:\n");
        for (name, from, into) in flows {
            yaml.push_str(&format!(
                "  {name}:\n    apply:\n      from: {from}\n      into: {into}\n      keys: [k]\n"
            ));
        }
        Pipeline::from_str(&yaml, Path::new("smelt.yaml")).unwrap()
    }

    fn names(flows: &[&Flow]) -> Vec<String> {
        flows.iter().map(|f| f.name.clone()).collect()
    }

    #[test]
    fn downstream_flows_run_after_their_upstream() {
        let p = pipeline(&[
            ("gold", "s.orders", "g.orders"),
            ("other", "b.x", "s.x"),
            ("silver", "b.orders", "s.orders"),
        ]);
        let all: Vec<&Flow> = p.flows.iter().collect();
        assert_eq!(
            names(&run_order(&all).unwrap()),
            ["other", "silver", "gold"]
        );
        // Selecting only the downstream flow runs it alone.
        assert_eq!(names(&run_order(&all[..1]).unwrap()), ["gold"]);
    }

    #[test]
    fn cycles_are_errors() {
        // A pipeline file with a cycle does not load; the run order checks again.
        let (a, b) = (
            pipeline(&[("a", "s.b", "s.a")]),
            pipeline(&[("b", "s.a", "s.b")]),
        );
        let all: Vec<&Flow> = vec![&a.flows[0], &b.flows[0]];
        let e = run_order(&all).unwrap_err().to_string();
        assert!(e.contains("`a`, `b`") && e.contains("cycle"), "{e}");
    }

    #[test]
    fn file_readers_run_after_the_export_that_writes_their_folder() {
        let yaml = "lake: l\nflows:\n  replace:\n    replace_where:\n      from: ./out/sales/**/*.parquet\n      format: parquet\n      into: s.copy\n      predicate: \"true\"\n  export:\n    export:\n      from: s.sales\n      to: out/sales\n  other:\n    ingest:\n      from: ./landing\n      into: b.raw\n      format: csv\n";
        let p = Pipeline::from_str(yaml, Path::new("smelt.yaml")).unwrap();
        let all: Vec<&Flow> = p.flows.iter().collect();
        assert_eq!(
            names(&run_order(&all).unwrap()),
            ["export", "replace", "other"]
        );
    }
}
