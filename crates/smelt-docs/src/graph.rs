//! The pipeline's DAG as SVG: every table and flow a node, arrows from what a flow reads to
//! the flow and from the flow to what it writes, laid out in layers left to right by
//! `layout-rs` (its Sugiyama placer), drawn by a backend of ours so that each node is a link
//! to its details (`#flow-…`, `#table-…`) with classes saying what it is and, for a flow,
//! how its last run ended.

use std::fmt::Write;

use layout::core::base::Orientation;
use layout::core::color::Color;
use layout::core::format::{ClipHandle, RenderBackend};
use layout::core::geometry::Point;
use layout::core::style::StyleAttr;
use layout::std_shapes::render::get_shape_size;
use layout::std_shapes::shapes::{Arrow, Element, ShapeKind};
use layout::topo::layout::VisualGraph;

use crate::escape;
use crate::model::Docs;
use crate::model::anchor;

/// The font size of the labels (px).
const FONT: usize = 14;

/// A node's identity in the graph: what [`Svg`] needs to draw it as a link.
struct Node {
    /// The anchor it links to.
    href: String,
    /// Its classes (`node flow failed`, `node table`).
    class: String,
    /// Its name, for the page's tests and tooltips.
    name: String,
}

/// The DAG of `docs` as an SVG element.
pub fn svg(docs: &Docs) -> String {
    let mut nodes: Vec<Node> = Vec::new();
    let mut graph = VisualGraph::new(Orientation::LeftToRight);
    let mut add = |graph: &mut VisualGraph, node: Node, label: &str, fill: u32| {
        let shape = ShapeKind::new_box(label);
        let look = StyleAttr::new(
            Color::new(0x44_44_44_ff),
            1,
            Some(Color::new(fill)),
            6,
            FONT,
        );
        let size = get_shape_size(Orientation::LeftToRight, &shape, FONT, false);
        // The node's index, for the backend to find its identity again.
        let element = Element::create_with_properties(
            shape,
            look,
            Orientation::LeftToRight,
            size,
            nodes.len().to_string(),
        );
        nodes.push(node);
        graph.add_node(element)
    };
    let mut tables = Vec::new();
    for t in &docs.tables {
        let node = Node {
            href: format!("#{}", anchor("table", &t.name)),
            class: format!("node table {}", t.format),
            name: t.name.clone(),
        };
        let handle = add(&mut graph, node, &t.name, 0xf4_f6_f8_ff);
        tables.push((t.name.as_str(), handle));
    }
    let table = |name: &str| tables.iter().find(|(n, _)| *n == name).map(|(_, h)| *h);
    for f in &docs.flows {
        let state = f.state();
        let node = Node {
            href: format!("#{}", anchor("flow", &f.name)),
            class: format!("node flow {}", state.replace('_', "-")),
            name: f.name.clone(),
        };
        let fill = match state {
            "failed" => 0xf8_d7_da_ff,
            "applied" | "up_to_date" | "no_columns" => 0xd4_ed_da_ff,
            _ => 0xff_f3_cd_ff,
        };
        let label = format!("{}\n{}", f.name, f.kind);
        let handle = add(&mut graph, node, &label, fill);
        for source in &f.sources {
            if let Some(s) = table(source) {
                graph.add_edge(Arrow::simple(""), s, handle);
            }
        }
        if let Some(t) = table(&f.target) {
            graph.add_edge(Arrow::simple(""), handle, t);
        }
    }
    if nodes.is_empty() {
        return String::from("<svg class=\"dag\" width=\"0\" height=\"0\"></svg>");
    }
    let mut out = Svg {
        nodes: &nodes,
        body: String::new(),
        size: Point::zero(),
    };
    graph.do_it(false, false, false, &mut out);
    out.finish()
}

/// A render backend writing plain SVG: nodes as links, labels that let clicks through.
struct Svg<'a> {
    nodes: &'a [Node],
    body: String,
    size: Point,
}

impl Svg<'_> {
    fn grow(&mut self, at: Point, size: Point) {
        self.size.x = self.size.x.max(at.x + size.x + 5.0);
        self.size.y = self.size.y.max(at.y + size.y + 5.0);
    }

    fn finish(self) -> String {
        let (w, h) = (self.size.x.ceil(), self.size.y.ceil());
        format!(
            "<svg class=\"dag\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\
             <defs><marker id=\"head\" markerWidth=\"10\" markerHeight=\"7\" refX=\"10\" refY=\"3.5\" orient=\"auto\">\
             <polygon points=\"0 0, 10 3.5, 0 7\" fill=\"#555\"/></marker></defs>{}</svg>",
            self.body
        )
    }
}

impl RenderBackend for Svg<'_> {
    fn draw_rect(
        &mut self,
        xy: Point,
        size: Point,
        look: &StyleAttr,
        properties: Option<String>,
        _clip: Option<ClipHandle>,
    ) {
        self.grow(xy, size);
        let fill = look.fill_color.map_or("none".into(), |c| c.to_web_color());
        let rect = format!(
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"{}\" fill=\"{fill}\" stroke=\"{}\"/>",
            xy.x,
            xy.y,
            size.x,
            size.y,
            look.rounded,
            look.line_color.to_web_color()
        );
        let node = properties
            .and_then(|p| p.parse::<usize>().ok())
            .and_then(|i| self.nodes.get(i));
        match node {
            Some(n) => {
                let _ = write!(
                    self.body,
                    "<a href=\"{}\"><g class=\"{}\" data-name=\"{}\"><title>{}</title>{rect}</g></a>",
                    escape(&n.href),
                    n.class,
                    escape(&n.name),
                    escape(&n.name)
                );
            }
            None => self.body.push_str(&rect),
        }
    }

    fn draw_line(&mut self, start: Point, stop: Point, look: &StyleAttr, _: Option<String>) {
        let _ = write!(
            self.body,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\"/>",
            start.x,
            start.y,
            stop.x,
            stop.y,
            look.line_color.to_web_color()
        );
    }

    fn draw_circle(&mut self, xy: Point, size: Point, look: &StyleAttr, _: Option<String>) {
        self.grow(xy, size);
        let _ = write!(
            self.body,
            "<ellipse cx=\"{:.1}\" cy=\"{:.1}\" rx=\"{:.1}\" ry=\"{:.1}\" fill=\"none\" stroke=\"{}\"/>",
            xy.x,
            xy.y,
            size.x / 2.0,
            size.y / 2.0,
            look.line_color.to_web_color()
        );
    }

    fn draw_text(&mut self, xy: Point, text: &str, look: &StyleAttr) {
        let lines: Vec<&str> = text.lines().collect();
        let height = (lines.len() * look.font_size) as f64;
        let mut spans = String::new();
        for (i, line) in lines.iter().enumerate() {
            let class = if i == 0 { "name" } else { "kind" };
            let _ = write!(
                spans,
                "<tspan class=\"{class}\" x=\"{:.1}\" dy=\"{}\">{}</tspan>",
                xy.x,
                if i == 0 { "0" } else { "1.2em" },
                escape(line)
            );
        }
        let _ = write!(
            self.body,
            "<text class=\"label\" text-anchor=\"middle\" x=\"{:.1}\" y=\"{:.1}\">{spans}</text>",
            xy.x,
            xy.y - height / 2.0 + look.font_size as f64 * 0.8
        );
    }

    fn draw_arrow(
        &mut self,
        path: &[(Point, Point)],
        dashed: bool,
        head: (bool, bool),
        look: &StyleAttr,
        _: Option<String>,
        _text: &str,
    ) {
        if path.len() < 2 {
            return;
        }
        for (a, b) in path {
            self.grow(*a, Point::zero());
            self.grow(*b, Point::zero());
        }
        let mut d = format!(
            "M {:.1} {:.1} C {:.1} {:.1}, {:.1} {:.1}, {:.1} {:.1}",
            path[0].0.x,
            path[0].0.y,
            path[0].1.x,
            path[0].1.y,
            path[1].0.x,
            path[1].0.y,
            path[1].1.x,
            path[1].1.y
        );
        for (a, b) in &path[2..] {
            let _ = write!(d, " S {:.1} {:.1}, {:.1} {:.1}", a.x, a.y, b.x, b.y);
        }
        let _ = write!(
            self.body,
            "<path class=\"edge\" d=\"{d}\" fill=\"none\" stroke=\"{}\"{}{}/>",
            look.line_color.to_web_color(),
            if dashed {
                " stroke-dasharray=\"5,5\""
            } else {
                ""
            },
            if head.1 {
                " marker-end=\"url(#head)\""
            } else {
                ""
            }
        );
    }

    fn create_clip(&mut self, _xy: Point, _size: Point, _rounded: usize) -> ClipHandle {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FlowDoc, RunDoc, TableDoc};

    fn docs(flows: usize) -> Docs {
        let mut d = Docs::default();
        d.tables.push(TableDoc {
            name: "raw.orders".into(),
            format: "delta".into(),
            ..Default::default()
        });
        for i in 0..flows {
            d.tables.push(TableDoc {
                name: format!("silver.t{i}"),
                format: "delta".into(),
                ..Default::default()
            });
            d.flows.push(FlowDoc {
                name: format!("f{i}"),
                kind: "apply (SCD1)".into(),
                sources: vec!["raw.orders".into()],
                target: format!("silver.t{i}"),
                runs: vec![RunDoc {
                    status: if i == 1 { "failed" } else { "applied" }.into(),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        d
    }

    #[test]
    fn every_node_links_to_its_details_and_a_failed_flow_is_marked() {
        let svg = svg(&docs(3));
        assert_eq!(svg.matches("<g class=\"node table delta\"").count(), 4);
        assert_eq!(svg.matches("<g class=\"node flow").count(), 3);
        assert_eq!(svg.matches("class=\"edge\"").count(), 6);
        assert!(
            svg.contains("<a href=\"#flow-f1\"><g class=\"node flow failed\" data-name=\"f1\">"),
            "{svg}"
        );
        assert!(svg.contains("<a href=\"#table-silver.t2\">"), "{svg}");
    }

    #[test]
    fn thirty_flows_lay_out_in_layers() {
        let svg = svg(&docs(30));
        assert_eq!(svg.matches("<g class=\"node flow").count(), 30);
        // Three layers left to right: wider than tall is not required, but it must be finite.
        assert!(svg.starts_with("<svg class=\"dag\""));
        assert!(!svg.contains("NaN"), "{svg}");
    }
}
