//! What smelt's tests share, so that each crate's tests say only what they test:
//!
//! * [`mem`]: the engine's ports in memory (a lake of Arrow batches), for the run contract
//!   without storage;
//! * [`batches`]: building bronze batches and reading columns back;
//! * [`crash`]: a table whose commit dies as a killed process would;
//! * [`delta`]: smelt's Delta lake as a [`Backend`];
//! * [`backend`]: where the model suites run ([`Target`]): a table format under test and a
//!   harness that runs apply flows on it as `smelt run` does, or another engine;
//! * [`scd1`], [`scd2`]: the SCD model properties — the suite every table format runs
//!   ([`conformance_suite!`]): in memory (`smelt-engine`), Delta (`smelt-delta`) and
//!   Iceberg (`smelt-iceberg`), and the Spark engine ([`model_suite!`], smelt-cli's tests);
//! * [`services`]: the services of `testenv/` (S3, Azure, an Iceberg REST catalog),
//!   started on loopback ports.

pub mod backend;
pub mod batches;
pub mod crash;
pub mod delta;
pub mod mem;
pub mod scd1;
pub mod scd2;
pub mod services;

pub use backend::{Backend, Harness, How, Target};
/// The property-test crate the suites are written with.
pub use proptest;

/// Property cases per test: `PROPTEST_CASES`, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(default)
}

/// The port conformance suite for backend `$backend` (a [`Backend`]): the SCD1 and SCD2
/// model properties and their spelled-out cases, as `#[test]`s of the calling file.
#[macro_export]
macro_rules! conformance_suite {
    ($backend:ty) => {
        $crate::model_suite!($crate::Harness<$backend>, 16, 24);
    };
}

/// The SCD1 and SCD2 model properties (`$scd1` and `$scd2` cases each, unless
/// `PROPTEST_CASES` says) and their spelled-out cases on target `$target` (a [`Target`]),
/// as `#[test]`s of the calling file.
#[macro_export]
macro_rules! model_suite {
    ($target:ty, $scd1:expr, $scd2:expr) => {
        $crate::proptest::proptest! {
            #![proptest_config($crate::proptest::test_runner::Config {
                cases: $crate::cases($scd1),
                max_shrink_iters: 50,
                ..$crate::proptest::test_runner::Config::default()
            })]

            #[test]
            fn scd1_silver_and_tombstones_match_the_model_after_every_run(
                plan in $crate::scd1::delivery()
            ) {
                $crate::scd1::deliver::<$target>(&plan);
            }
        }

        $crate::proptest::proptest! {
            #![proptest_config($crate::proptest::test_runner::Config {
                cases: $crate::cases($scd2),
                max_shrink_iters: 50,
                ..$crate::proptest::test_runner::Config::default()
            })]

            #[test]
            fn scd2_history_matches_the_model_after_every_run(plan in $crate::scd2::delivery()) {
                $crate::scd2::deliver::<$target>(&plan, false);
            }

            #[test]
            fn scd2_history_matches_the_model_with_an_untracked_sequence(
                plan in $crate::scd2::delivery()
            ) {
                $crate::scd2::deliver::<$target>(&plan, true);
            }
        }

        #[test]
        fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie() {
            $crate::scd1::null_and_composite_keys::<$target>(false);
        }

        #[test]
        fn scd1_null_and_composite_keys_with_late_deletes_and_a_tie_merge_on_read() {
            $crate::scd1::null_and_composite_keys::<$target>(true);
        }

        #[test]
        fn scd2_deletes_that_arrive_before_the_versions_they_close() {
            $crate::scd2::deletes_that_arrive_before_the_versions_they_close::<$target>();
        }
    };
}
