//! TPC-H `part` rows as `.tbl` files: day 1 is the whole table at a scale factor, day 2
//! changes some parts and adds new ones, so an ingest + apply pipeline has updates and
//! inserts to propagate.

use std::io::Write;
use std::path::Path;

use tpchgen::generators::PartGenerator;

/// One `part` row, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRow {
    /// Key.
    pub p_partkey: i64,
    /// Name.
    pub p_name: String,
    /// Manufacturer.
    pub p_mfgr: String,
    /// Brand.
    pub p_brand: String,
    /// Type.
    pub p_type: String,
    /// Size.
    pub p_size: i32,
    /// Container.
    pub p_container: String,
    /// Retail price in cents.
    pub p_retailprice_cents: i64,
    /// Comment.
    pub p_comment: String,
}

impl PartRow {
    /// The row as a `.tbl` line (fields separated and ended by `|`).
    pub fn tbl(&self) -> String {
        format!(
            "{}|{}|{}|{}|{}|{}|{}|{}.{:02}|{}|",
            self.p_partkey,
            self.p_name,
            self.p_mfgr,
            self.p_brand,
            self.p_type,
            self.p_size,
            self.p_container,
            self.p_retailprice_cents / 100,
            self.p_retailprice_cents % 100,
            self.p_comment
        )
    }
}

/// The generator's `part` rows at `scale`, chunk `part` of `parts` (1-based).
fn generate(scale: f64, part: i32, parts: i32) -> Vec<PartRow> {
    PartGenerator::new(scale, part, parts)
        .iter()
        .map(|p| PartRow {
            p_partkey: p.p_partkey,
            p_name: p.p_name.to_string(),
            p_mfgr: p.p_mfgr.to_string(),
            p_brand: p.p_brand.to_string(),
            p_type: p.p_type.to_string(),
            p_size: p.p_size,
            p_container: p.p_container.to_string(),
            p_retailprice_cents: p.p_retailprice.0,
            p_comment: p.p_comment.to_string(),
        })
        .collect()
}

/// Day 1: every part at `scale` (200,000 × scale rows), as the generator makes them.
pub fn day1(scale: f64) -> Vec<PartRow> {
    generate(scale, 1, 1)
}

/// Parts changed on day 2: every 20th key.
pub const CHANGE_EVERY: i64 = 20;

/// Parts added on day 2.
pub const NEW_PARTS: usize = 100;

/// Day 2: every 20th part of day 1 with its price raised by 10% (rounded down to the
/// cent) and its comment replaced, then the next 100 keys as the generator makes them at
/// twice the scale.
pub fn day2(scale: f64) -> Vec<PartRow> {
    let mut rows: Vec<PartRow> = day1(scale)
        .into_iter()
        .filter(|p| p.p_partkey % CHANGE_EVERY == 0)
        .map(|mut p| {
            p.p_retailprice_cents += p.p_retailprice_cents / 10;
            p.p_comment = format!("repriced {}", p.p_partkey);
            p
        })
        .collect();
    let count = day1(scale).len() as i64;
    rows.extend(
        generate(scale * 2.0, 2, 2)
            .into_iter()
            .filter(|p| p.p_partkey > count)
            .take(NEW_PARTS),
    );
    rows
}

/// Silver after both days: day 2's rows replace day 1's, new keys added; by key.
pub fn after_day2(scale: f64) -> Vec<PartRow> {
    let mut rows = day1(scale);
    for p in day2(scale) {
        match rows.iter_mut().find(|r| r.p_partkey == p.p_partkey) {
            Some(r) => *r = p,
            None => rows.push(p),
        }
    }
    rows.sort_by_key(|r| r.p_partkey);
    rows
}

/// Writes `rows` as a `.tbl` file, under a hidden name first and renamed when complete,
/// so a reader of the folder never sees it half-written.
pub fn write_tbl(rows: &[PartRow], path: &Path) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    for r in rows {
        writeln!(out, "{}", r.tbl())?;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day1_is_the_generator_table_and_day2_changes_and_adds() {
        let d1 = day1(0.01);
        assert_eq!(d1.len(), 2000);
        // The line TPC-H's own documentation shows for part 1.
        assert_eq!(
            d1[0].tbl(),
            "1|goldenrod lavender spring chocolate lace|Manufacturer#1|Brand#13|PROMO BURNISHED COPPER|7|JUMBO PKG|901.00|ly. slyly ironi|"
        );
        let d2 = day2(0.01);
        assert_eq!(d2.len(), 100 + NEW_PARTS);
        assert_eq!(d2[0].p_partkey, 20);
        assert_eq!(
            d2[0].p_retailprice_cents,
            d1[19].p_retailprice_cents * 11 / 10
        );
        assert_eq!(d2[100].p_partkey, 2001);
        assert_eq!(after_day2(0.01).len(), 2100);
    }
}
