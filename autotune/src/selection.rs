//! Which cases a run tunes: every preset's distinct shape by default, narrowed by `--model`,
//! `--config`, `--only` and `--quick`.

use codegen::model::{preset, presets};
use codegen::spec::Placement;
use runtime::tuning::Subject;
use thiserror::Error;

use crate::candidates::{Case, Grid, OptIn, CONTEXTS, QUICK_CONTEXTS, SUBJECTS};

/// A selection the tuner cannot serve.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SelectionError {
    #[error("unknown model {got:?}; allowed: {allowed}")]
    Model { got: String, allowed: String },
    #[error(
        "bad --only {got:?}: {why}; the form is SUBJECT[/PLACEMENT[/CONTEXT]] with SUBJECT \
         one of scan, gather, transfer, plan, select, attention, oracle, landmark, fetch, \
         pariskv_vote, pariskv_topc, pariskv_rerank, PLACEMENT host or hbm, CONTEXT 32k, 128k or 1m (e.g. scan/hbm/128k, select/hbm/1m)"
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

/// The cases of a run, in the order of [`SUBJECTS`] for every shape and context (so the scan
/// and the gather are tuned before the transfer that is built from them, and the cases that
/// share inputs follow each other).
pub fn select(
    models: &[String],
    only: &[String],
    quick: bool,
) -> Result<Vec<Case>, SelectionError> {
    select_shapes(models, &[], only, quick, OptIn::default())
}

/// [`select`] with shapes read from `config.json` files (`--config`) beside the presets
/// named in `models` (with neither, every preset's shape), each case trying the candidates of
/// `opt_in` too.
pub fn select_shapes(
    models: &[String],
    extra: &[codegen::model::ModelShape],
    only: &[String],
    quick: bool,
    opt_in: OptIn,
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
                    opt_in,
                    grid: if quick { Grid::Quick } else { Grid::Full },
                };
                let wanted = filters.is_empty() || filters.iter().any(|f| f.matches(&case));
                if wanted {
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
    use runtime::tuning::TunedFamily;

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
        // Attention and fetch follow the select case whose scores they share.
        let select_at = i(Subject::Kernel(TunedFamily::Select));
        assert!(i(Subject::Kernel(TunedFamily::Attention)) > select_at);
        assert!(i(Subject::Kernel(TunedFamily::Fetch)) > select_at);
        // Every family the step looks up a tile for is tuned, by default and when named.
        for family in TunedFamily::ALL {
            let named = select(&[], &[family.as_str().to_string()], false).unwrap();
            for cases in [&all, &named] {
                assert!(
                    cases.iter().any(|c| c.subject == Subject::Kernel(family)),
                    "{family:?}"
                );
            }
        }
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
            "selection",
            "teleport",
            "scan/hbm/1m/x",
        ] {
            let err = select(&[], &[bad.into()], false).unwrap_err();
            assert!(matches!(err, SelectionError::Only { .. }), "{bad}: {err}");
        }
        for empty in [
            "transfer/hbm",
            "select/host",
            "attention/host",
            "plan/host",
            "pariskv_topc/host",
        ] {
            assert!(
                matches!(
                    select(&[], &[empty.into()], false),
                    Err(SelectionError::Empty { .. })
                ),
                "{empty}"
            );
        }
    }

    #[test]
    fn only_names_the_pariskv_families() {
        let one = select(&["qwen3-8b".into()], &["pariskv_topc/hbm/1m".into()], false).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].subject, Subject::Kernel(TunedFamily::PariskvTopc));
        let reranks = select(&["qwen3-8b".into()], &["pariskv_rerank".into()], true).unwrap();
        assert_eq!(reranks.len(), 2 * QUICK_CONTEXTS.len());
    }

    #[test]
    fn the_only_message_names_every_subject() {
        let err = OnlyFilter::parse("teleport").unwrap_err().to_string();
        for (subject, _) in SUBJECTS {
            assert!(err.contains(subject.as_str()), "{subject}: {err}");
        }
    }

    #[test]
    fn only_narrows_to_the_new_families() {
        let one = select(&["qwen3-8b".into()], &["select/hbm/1m".into()], false).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            (one[0].subject, one[0].placement, one[0].tokens),
            (
                Subject::Kernel(TunedFamily::Select),
                Placement::Hbm,
                1 << 20
            )
        );
        // Every preset shape's select cases, and nothing else.
        let selects = select(&[], &["select".into()], false).unwrap();
        assert!(selects
            .iter()
            .all(|c| c.subject == Subject::Kernel(TunedFamily::Select)));
        assert_eq!(selects.len(), 3 * CONTEXTS.len());
        // The row families in both placements; host only when asked.
        let fetch = select(&["qwen3-8b".into()], &["fetch".into()], true).unwrap();
        assert_eq!(fetch.len(), 2 * QUICK_CONTEXTS.len());
        let host = select(&["qwen3-8b".into()], &["oracle/host".into()], true).unwrap();
        assert!(host
            .iter()
            .all(|c| c.placement == Placement::Host
                && c.subject == Subject::Kernel(TunedFamily::Oracle)));
        assert_eq!(host.len(), QUICK_CONTEXTS.len());
        // Several filters add up.
        let both = select(
            &["qwen3-8b".into()],
            &["attention/hbm/32k".into(), "plan/hbm/32k".into()],
            false,
        )
        .unwrap();
        assert_eq!(both.len(), 2);
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
        let only_config =
            select_shapes(&[], &[shape.clone()], &[], true, OptIn::default()).unwrap();
        assert!(only_config.iter().all(|c| c.head_dim == 64));
        assert!(!only_config.is_empty());
        let both =
            select_shapes(&["qwen3-8b".into()], &[shape], &[], true, OptIn::default()).unwrap();
        assert!(both.iter().any(|c| c.head_dim == 64));
        assert!(both.iter().any(|c| c.head_dim == 128));
    }
}
