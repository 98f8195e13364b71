//! [`Ordered`]: a YAML map read in file order, with each name defined once (`flows:`,
//! `expect:`).

use indexmap::IndexMap;
use serde::Deserialize;

/// A YAML map in file order, names unique (`flows:`, `expect:`).
#[derive(Debug)]
pub(crate) struct Ordered<T>(pub(crate) IndexMap<String, T>);

impl<T> Default for Ordered<T> {
    fn default() -> Self {
        Self(IndexMap::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Ordered<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = Ordered<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of names to entries")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut out = IndexMap::new();
                while let Some((k, v)) = map.next_entry::<String, T>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("`{k}` is defined twice")));
                    }
                    out.insert(k, v);
                }
                Ok(Ordered(out))
            }
            fn visit_unit<E: serde::de::Error>(self) -> std::result::Result<Self::Value, E> {
                Ok(Ordered::default())
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::Pipeline;
    use crate::error::Result;

    fn load(text: &str) -> Result<Pipeline> {
        Pipeline::from_str(text, Path::new("smelt.yaml"))
    }

    #[test]
    fn a_name_defined_twice_names_the_map_and_the_line() {
        let err = load("lake: l\nflows:\n  p:\n    apply:\n      from: a.b\n      into: c.d\n      keys: [k]\n      expect:\n        named: x > 1\n        named: x > 2\n").unwrap_err();
        let e = &err.0[0];
        assert!(
            e.message.contains("`named` is defined twice"),
            "{}",
            e.message
        );
        assert!(e.field.contains("expect"), "{}", e.field);
        assert!(e.line.is_some());
    }
}
