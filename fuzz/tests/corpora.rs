//! Every committed input of every fuzz target (`corpus/<target>/`: the seeds of `seed.py`
//! and what fuzzing found), replayed through the target: a crash once found stays fixed.

use std::path::PathBuf;

#[test]
fn every_corpus_input_passes_its_target() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, run) in smelt_fuzz::TARGETS {
        let folder = root.join(target);
        let mut inputs: Vec<PathBuf> = std::fs::read_dir(&folder)
            .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
            .map(|e| e.expect("a corpus entry").path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "target `{target}` has no corpus");
        for input in inputs {
            let data = std::fs::read(&input).expect("a corpus file");
            if std::panic::catch_unwind(|| run(&data)).is_err() {
                panic!("`{target}` fails on {}", input.display());
            }
        }
    }
}
