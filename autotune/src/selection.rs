//! Which cases a run tunes: every preset's distinct shape by default, narrowed by `--model`,
//! `--config`, `--only` and `--quick`.

use codegen::model::{preset, presets};
use codegen::spec::Placement;
use runtime::tuning::Subject;
use thiserror::Error;

use crate::candidates::{Case, CONTEXTS, QUICK_CONTEXTS, SUBJECTS};

/// A selection the tuner cannot serve.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SelectionError {
    #[error("unknown model {got:?}; allowed: {allowed}")]
    Model { got: String, allowed: String },
    #[error(
        "bad --only {got:?}: {why}; the form is SUBJECT[/PLACEMENT[/CONTEXT]] with SUBJECT \
         one of scan, gather, transfer, PLACEMENT host or hbm, CONTEXT 32k, 128k or 1m \
         (e.g. scan/hbm/128k)"
    )]
    Only { got: String, why: String },
    #[error("the selection is empty: --only {only:?} names no case that is tuned")]
    Empty { only: String },
}

/// One `--only` filter; `None` fields match everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnlyFilter {
    pub subject: Option<Subject>,
    pub placement: Option<Placement>,
    pub tokens: Option<usize>,
}

impl OnlyFilter {
    /// Parses `SUBJECT[/PLACEMENT[/CONTEXT]]`.
    pub fn parse(text: &str) -> Result<Self, SelectionError> {
        let bad = |why: String| SelectionError::Only {
            got: text.to_string(),
            why,
        };
        let mut parts = text.split('/');
        let subject = match parts.next().unwrap_or("") {
            "" => return Err(bad("no subject".into())),
            name => Subject::try_from(name.to_string()).map_err(bad)?,
        };
        if !SUBJECTS.iter().any(|(s, _)| *s == subject) {
            return Err(bad(format!("{subject} is not tuned")));
        }
        let placement = match parts.next() {
            None => None,
            Some("host") => Some(Placement::Host),
            Some("hbm") => Some(Placement::Hbm),
            Some(p) => return Err(bad(format!("unknown placement {p:?}"))),
        };
        let tokens = match parts.next() {
            None => None,
            Some(c) => Some(match c.to_ascii_lowercase().as_str() {
                "32k" => 1 << 15,
                "128k" => 1 << 17,
                "1m" => 1 << 20,
                _ => return Err(bad(format!("unknown context {c:?}"))),
            }),
        };
        if let Some(extra) = parts.next() {
            return Err(bad(format!("unexpected {extra:?}")));
        }
        Ok(OnlyFilter {
            subject: Some(subject),
            placement,
            tokens,
        })
    }

    fn matches(&self, case: &Case) -> bool {
        self.subject.is_none_or(|s| s == case.subject)
            && self.placement.is_none_or(|p| p == case.placement)
            && self.tokens.is_none_or(|t| t == case.tokens)
    }
}

/// The cases of a run, ordered so that every shape and context tunes the scan and the gather
/// before the transfer that is built from them.
pub fn select(
    models: &[String],
    only: &[String],
    quick: bool,
) -> Result<Vec<Case>, SelectionError> {
    select_shapes(models, &[], only, quick)
}

/// [`select`] with shapes read from `config.json` files (`--config`) beside the presets
/// named in `models`; with neither, every preset's shape.
pub fn select_shapes(
    models: &[String],
    extra: &[codegen::model::ModelShape],
    only: &[String],
    quick: bool,
) -> Result<Vec<Case>, SelectionError> {
    let mut shapes: Vec<codegen::model::ModelShape> = if models.is_empty() && extra.is_empty() {
        presets().iter().map(|p| p.shape()).collect()
    } else {
        models
            .iter()
            .map(|m| {
                preset(m).map_err(|_| SelectionError::Model {
                    got: m.clone(),
                    allowed: presets()
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                })
            })
            .collect::<Result<_, _>>()?
    };
    shapes.extend(extra.iter().cloned());
    let filters: Vec<OnlyFilter> = only
        .iter()
        .map(|c| OnlyFilter::parse(c))
        .collect::<Result<_, _>>()?;
    // One case per distinct (D, G); the first preset of a shape sets its KV heads.
    let mut distinct: Vec<(usize, usize, usize)> = Vec::new();
    for s in &shapes {
        let (d, g) = (s.head_dim, s.group_size());
        if !distinct.iter().any(|&(dd, gg, _)| (dd, gg) == (d, g)) {
            distinct.push((d, g, s.kv_heads));
        }
    }
    let contexts: &[usize] = if quick { &QUICK_CONTEXTS } else { &CONTEXTS };
    let mut cases = Vec::new();
    for &(head_dim, group, kv_heads) in &distinct {
        for &tokens in contexts {
            for &(subject, placement) in &SUBJECTS {
                let case = Case {
                    subject,
                    head_dim,
                    group,
                    kv_heads,
                    placement,
                    tokens,
                };
                if filters.is_empty() || filters.iter().any(|f| f.matches(&case)) {
                    cases.push(case);
                }
            }
        }
    }
    if cases.is_empty() {
        return Err(SelectionError::Empty {
            only: only.join(" "),
        });
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::step::TunedFamily;

    #[test]
    fn the_default_is_every_distinct_preset_shape_at_every_context() {
        let all = select(&[], &[], false).unwrap();
        let mut shapes: Vec<(usize, usize)> = presets()
            .iter()
            .map(|p| (p.shape().head_dim, p.shape().group_size()))
            .collect();
        shapes.sort();
        shapes.dedup();
        assert_eq!(all.len(), shapes.len() * CONTEXTS.len() * SUBJECTS.len());
        let quick = select(&[], &[], true).unwrap();
        assert_eq!(
            quick.len(),
            shapes.len() * QUICK_CONTEXTS.len() * SUBJECTS.len()
        );
        // The transfer of a (shape, context) comes after its scan and gather.
        let i = |s: Subject| all.iter().position(|c| c.subject == s).unwrap();
        assert!(i(Subject::Transfer) > i(Subject::Kernel(TunedFamily::Gather)));
    }

    #[test]
    fn model_and_config_narrow() {
        let one = select(&["qwen3-8b".into()], &["scan/hbm/128k".into()], false).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            (
                one[0].head_dim,
                one[0].group,
                one[0].placement,
                one[0].tokens
            ),
            (128, 4, Placement::Hbm, 1 << 17)
        );
        let scans = select(&["qwen3-8b".into()], &["scan".into()], true).unwrap();
        assert_eq!(scans.len(), 2 * QUICK_CONTEXTS.len());
    }

    #[test]
    fn bad_selections_are_typed() {
        assert!(matches!(
            select(&["gpt-5".into()], &[], false),
            Err(SelectionError::Model { .. })
        ));
        for bad in [
            "",
            "scan/pcie",
            "scan/hbm/64k",
            "select",
            "teleport",
            "scan/hbm/1m/x",
        ] {
            let err = select(&[], &[bad.into()], false).unwrap_err();
            assert!(matches!(err, SelectionError::Only { .. }), "{bad}: {err}");
        }
        assert!(matches!(
            select(&[], &["transfer/hbm".into()], false),
            Err(SelectionError::Empty { .. })
        ));
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;

    #[test]
    fn a_config_shape_is_tuned_beside_the_named_presets() {
        let mut shape = preset("qwen3-8b").unwrap();
        shape.name = "custom".into();
        shape.head_dim = 64;
        let only_config = select_shapes(&[], &[shape.clone()], &[], true).unwrap();
        assert!(only_config.iter().all(|c| c.head_dim == 64));
        assert!(!only_config.is_empty());
        let both = select_shapes(&["qwen3-8b".into()], &[shape], &[], true).unwrap();
        assert!(both.iter().any(|c| c.head_dim == 64));
        assert!(both.iter().any(|c| c.head_dim == 128));
    }
}
