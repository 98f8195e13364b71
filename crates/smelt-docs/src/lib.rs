//! The page of a pipeline (`smelt docs`): its DAG ([`graph`]), each flow's standing, runs
//! and data quality, and each table ([`page`]), drawn from a [`model::Docs`] the CLI
//! gathers from the pipeline file, the lake and the event log. Nothing here reads storage.

pub mod charts;
pub mod graph;
pub mod model;
pub mod page;

pub use model::Docs;

/// `text` escaped for HTML and SVG text and attributes (maud's escaping).
pub(crate) fn escape(text: &str) -> String {
    maud::html! { (text) }.into_string()
}
pub use page::render;
