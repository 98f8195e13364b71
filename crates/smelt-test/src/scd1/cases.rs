//! The model's cases spelled out: NULL and composite keys, late deletes, a delete before its
//! insert, a tie — each run's silver and tombstones written down by hand, and the model
//! checked against them before the table format is.

use super::*;

fn up(a: Option<&str>, b: Option<i64>, seq: i64, val: Option<u8>) -> Change {
    Change {
        key: key_of(a, b),
        seq,
        val,
        delete: false,
    }
}

fn del(a: Option<&str>, b: Option<i64>, seq: i64) -> Change {
    Change {
        key: key_of(a, b),
        seq,
        val: None,
        delete: true,
    }
}

fn row(a: &str, b: Option<i64>, val: Option<&str>, seq: i64) -> Row {
    (Some(a.into()), b, val.map(str::to_string), Some(seq))
}

fn tomb(a: &str, b: Option<i64>, seq: i64) -> Tomb {
    (Some(a.into()), b, Some(seq))
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// NULL and composite keys, late deletes, a delete before its insert, a tie, spelled out
/// (copy-on-write, or with `merge_on_read`).
pub fn null_and_composite_keys<T: Target>(merge_on_read: bool) {
    block_on(async {
        let mut h = T::start().await;
        let flow = flow(&h, merge_on_read);
        let (a1, a2, empty) = (Some("a1"), Some("a2"), Some(""));
        let commits = vec![
            vec![
                up(a1, None, 10, Some(0)),
                up(a1, Some(0), 10, Some(1)),
                // Deleted before it is ever inserted.
                del(a2, None, 20),
                // NULL in `a`: rejected.
                up(None, None, 5, Some(0)),
                // Sent twice.
                up(a1, None, 10, Some(0)),
            ],
            vec![
                // Late: older than the stored row; no tombstone either.
                del(a1, None, 5),
                // Older than the key's tombstone: stays deleted.
                up(a2, None, 15, Some(2)),
                del(a1, Some(0), 11),
                // The empty string is not NULL; a NULL value is stored as such.
                up(empty, None, 1, None),
                del(None, Some(0), 3),
            ],
            vec![
                up(a2, None, 25, Some(2)),
                // Older than the tombstone of (a1, 0).
                up(a1, Some(0), 9, Some(3)),
                up(a1, None, 12, Some(3)),
                // A tie: the later change (the delete) wins.
                up(empty, Some(0), 12, Some(1)),
                del(empty, Some(0), 12),
            ],
        ];
        let expected = [
            (
                vec![
                    row("a1", None, Some("v0"), 10),
                    row("a1", Some(0), Some("v1"), 10),
                ],
                vec![tomb("a2", None, 20)],
                1,
            ),
            (
                vec![row("", None, None, 1), row("a1", None, Some("v0"), 10)],
                vec![tomb("a1", Some(0), 11), tomb("a2", None, 20)],
                1,
            ),
            (
                vec![
                    row("", None, None, 1),
                    row("a1", None, Some("v3"), 12),
                    row("a2", None, Some("v2"), 25),
                ],
                vec![
                    tomb("", Some(0), 12),
                    tomb("a1", Some(0), 11),
                    tomb("a2", None, 20),
                ],
                0,
            ),
        ];
        let mut model = Model::default();
        for (i, (rows, tombs, rejected)) in expected.into_iter().enumerate() {
            append(&mut h, &commits[i]).await;
            let report = h.run("t", &flow, How::default()).await.unwrap();
            let by_model = model.plain(&commits[..=i], i as i64);
            assert_eq!(
                (model.rows(), model.tombs(), by_model),
                (sorted(rows), sorted(tombs), rejected),
                "the model, run {i}"
            );
            check(&h, &flow, &model, &report, rejected, &format!("run {i}")).await;
        }
        let how = How {
            full_refresh: true,
            ..How::default()
        };
        let report = h.run("t", &flow, how).await.unwrap();
        let mut fresh = Model::default();
        let rejected = fresh.plain(&commits, 2);
        assert_eq!(
            (fresh.rows(), fresh.tombs(), rejected),
            (
                model.rows(),
                sorted(vec![tomb("", Some(0), 12), tomb("a1", Some(0), 11)]),
                2
            ),
            "the model, rebuilt"
        );
        check(&h, &flow, &fresh, &report, rejected, "after --full-refresh").await;
        // Rejected keys are counted, not quarantined.
        assert!(h.scan(&rejects_table(&flow.into)).await.is_none());
    });
}
