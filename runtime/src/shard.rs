//! [`HeadShard`]: the KV heads one rank of a tensor-parallel group steps (issue #17).
//!
//! Attention is independent per KV head, so a layer's step splits across `P` GPUs by heads,
//! each GPU holding its heads' store and scanning it over its own link, as tensor parallelism
//! already splits a model's attention. The split is the one serving engines use (vLLM's
//! `get_num_kv_heads`): with `P` at most `H_kv`, rank `r` of `P` takes the contiguous KV heads
//! `[r*H_kv/P, (r+1)*H_kv/P)` (`P` must divide `H_kv`); with more ranks than KV heads each KV
//! head is replicated on `P/H_kv` consecutive ranks (`H_kv` must divide `P`), each rank taking
//! one KV head and its share of that head's query heads. Either way rank `r` takes the query
//! heads `[r*H_q/P, (r+1)*H_q/P)`, so `P` must divide `H_q`.
//!
//! A shard is the model a [`crate::step::Decoder`] of that rank is made for
//! ([`HeadShard::model`]) and the slice of the model's calibration it needs
//! ([`HeadShard::calibration`]); nothing in a step crosses ranks.

use std::ops::Range;

use codegen::model::ModelShape;
use thiserror::Error;

use crate::step::{Calibration, CalibrationError};

/// A split of a model's heads that tensor parallelism cannot make.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum ShardError {
    #[error("a tensor-parallel group of 0 ranks; give at least 1")]
    NoRanks,
    #[error("rank {rank} of a group of {ranks}; ranks are 0 to {}", ranks - 1)]
    Rank { rank: usize, ranks: usize },
    #[error(
        "{kv_heads} KV heads over {ranks} ranks: the ranks must divide the KV heads, or the KV \
         heads the ranks (each KV head then replicated on ranks / KV heads ranks)"
    )]
    KvHeads { kv_heads: usize, ranks: usize },
    #[error("{query_heads} query heads over {ranks} ranks: the ranks must divide the query heads")]
    QueryHeads { query_heads: usize, ranks: usize },
    #[error(transparent)]
    Calibration(#[from] CalibrationError),
}

/// The heads that rank `rank` of `ranks` steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadShard {
    pub rank: usize,
    pub ranks: usize,
    /// The model's KV heads this rank holds (one, shared with other ranks, when there are more
    /// ranks than KV heads).
    pub kv_heads: Range<usize>,
    /// The model's query heads this rank attends for.
    pub query_heads: Range<usize>,
}

impl HeadShard {
    /// Rank `rank`'s share of `model`'s heads among `ranks`.
    pub fn of(model: &ModelShape, rank: usize, ranks: usize) -> Result<HeadShard, ShardError> {
        if ranks == 0 {
            return Err(ShardError::NoRanks);
        }
        if rank >= ranks {
            return Err(ShardError::Rank { rank, ranks });
        }
        let (h_kv, h_q) = (model.kv_heads, model.query_heads);
        if !h_q.is_multiple_of(ranks) {
            return Err(ShardError::QueryHeads {
                query_heads: h_q,
                ranks,
            });
        }
        let kv_heads = if ranks <= h_kv && h_kv.is_multiple_of(ranks) {
            let per = h_kv / ranks;
            rank * per..(rank + 1) * per
        } else if ranks > h_kv && ranks.is_multiple_of(h_kv) {
            let head = rank / (ranks / h_kv);
            head..head + 1
        } else {
            return Err(ShardError::KvHeads {
                kv_heads: h_kv,
                ranks,
            });
        };
        let per_q = h_q / ranks;
        Ok(HeadShard {
            rank,
            ranks,
            kv_heads,
            query_heads: rank * per_q..(rank + 1) * per_q,
        })
    }

    /// Every rank's shard, in rank order.
    pub fn all(model: &ModelShape, ranks: usize) -> Result<Vec<HeadShard>, ShardError> {
        (0..ranks.max(1))
            .map(|rank| HeadShard::of(model, rank, ranks))
            .collect()
    }

    /// The model this rank's decoder and store are made for: its KV heads and query heads,
    /// everything else as `model`. Its group is `G` of the model, or, with KV heads replicated,
    /// the rank's share of one KV head's query heads.
    pub fn model(&self, model: &ModelShape) -> ModelShape {
        ModelShape {
            name: format!("{}-tp{}of{}", model.name, self.rank, self.ranks),
            kv_heads: self.kv_heads.len(),
            query_heads: self.query_heads.len(),
            ..model.clone()
        }
    }

    /// The slice of `calibration`, made for the whole `model`, that this rank's heads need.
    pub fn calibration(
        &self,
        model: &ModelShape,
        calibration: &Calibration,
    ) -> Result<Calibration, ShardError> {
        let want = (model.layers, model.kv_heads, model.head_dim);
        if calibration.dims() != want {
            return Err(CalibrationError::Model {
                got: calibration.dims(),
                want,
            }
            .into());
        }
        Ok(calibration.kv_heads(self.kv_heads.clone())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codegen::model::{preset, Basis};

    fn shape(query_heads: usize, kv_heads: usize) -> ModelShape {
        ModelShape {
            name: "m".into(),
            layers: 3,
            query_heads,
            kv_heads,
            head_dim: 64,
            qk_norm: false,
            basis: Basis::Raw,
        }
    }

    #[test]
    fn ranks_that_divide_the_kv_heads_take_contiguous_heads() {
        let model = preset("llama-3.1-70b").unwrap(); // 64 query heads, 8 KV heads
        for ranks in [1, 2, 4, 8] {
            let shards = HeadShard::all(&model, ranks).unwrap();
            let kv: Vec<usize> = shards.iter().flat_map(|s| s.kv_heads.clone()).collect();
            let q: Vec<usize> = shards.iter().flat_map(|s| s.query_heads.clone()).collect();
            assert_eq!(
                kv,
                (0..8).collect::<Vec<_>>(),
                "P = {ranks}: every KV head once"
            );
            assert_eq!(
                q,
                (0..64).collect::<Vec<_>>(),
                "P = {ranks}: every query head once"
            );
            for s in &shards {
                let m = s.model(&model);
                assert_eq!(m.group_size(), model.group_size(), "P = {ranks}");
                // A rank's query heads are exactly the groups of its KV heads.
                let g = model.group_size();
                assert_eq!(s.query_heads, s.kv_heads.start * g..s.kv_heads.end * g);
            }
        }
    }

    #[test]
    fn more_ranks_than_kv_heads_replicate_each_head() {
        let model = shape(32, 4); // G = 8
        let shards = HeadShard::all(&model, 16).unwrap();
        for (r, s) in shards.iter().enumerate() {
            assert_eq!(s.kv_heads, r / 4..r / 4 + 1, "rank {r}");
            assert_eq!(s.query_heads, 2 * r..2 * r + 2, "rank {r}");
            // Its two query heads belong to its KV head's group.
            assert_eq!(s.query_heads.start / 8, s.kv_heads.start, "rank {r}");
            let m = s.model(&model);
            assert_eq!((m.kv_heads, m.query_heads, m.group_size()), (1, 2, 2));
        }
    }

    #[test]
    fn splits_tensor_parallelism_cannot_make_are_refused_with_why() {
        let model = shape(28, 4); // qwen2.5-7b's heads
        let e = |r: Result<_, ShardError>| r.unwrap_err().to_string();
        assert!(e(HeadShard::of(&model, 0, 0)).contains("at least 1"));
        assert!(e(HeadShard::of(&model, 2, 2)).contains("ranks are 0 to 1"));
        let kv = e(HeadShard::of(&model, 0, 3));
        assert!(
            kv.contains("query heads") || kv.contains("KV heads"),
            "{kv}"
        );
        assert_eq!(
            HeadShard::of(&shape(24, 4), 0, 6),
            Err(ShardError::KvHeads {
                kv_heads: 4,
                ranks: 6
            })
        );
        assert_eq!(
            HeadShard::of(&model, 0, 8),
            Err(ShardError::QueryHeads {
                query_heads: 28,
                ranks: 8
            })
        );
        assert!(HeadShard::of(&model, 3, 4).is_ok());
    }

    #[test]
    fn a_rank_s_calibration_is_its_heads_of_every_layer() {
        let model = shape(16, 4);
        let (l, h, d) = (model.layers, model.kv_heads, model.head_dim);
        // Every value names its (layer, head, channel), so a wrong slice shows.
        let sigma2: Vec<f32> = (0..l * h * d).map(|i| i as f32).collect();
        let masks: Vec<u8> = (0..l * h * d).map(|i| u8::from(i % d < 5)).collect();
        let rotation: Vec<f32> = (0..l * h * d * d).map(|i| i as f32).collect();
        let full = Calibration::new(l, h, d)
            .with_sigma2(sigma2.clone())
            .unwrap()
            .with_double_sparsity(5, masks)
            .unwrap()
            .with_rotation(rotation.clone())
            .unwrap();
        let shard = HeadShard::of(&model, 1, 2).unwrap();
        assert_eq!(shard.kv_heads, 2..4);
        let part = shard.calibration(&model, &full).unwrap();
        assert_eq!(part.dims(), (l, 2, d));
        for layer in 0..l {
            let want: Vec<f32> = (2..4)
                .flat_map(|head| {
                    let at = (layer * h + head) * d;
                    sigma2[at..at + d].to_vec()
                })
                .collect();
            assert_eq!(
                part.sigma2(layer).unwrap(),
                want.as_slice(),
                "layer {layer}"
            );
            let (r, m) = part.double_sparsity(layer).unwrap();
            assert_eq!((r, m.len()), (5, 2 * d));
            let at = (layer * h + 2) * d * d;
            assert_eq!(
                part.rotation(layer).unwrap(),
                &rotation[at..at + 2 * d * d],
                "layer {layer}"
            );
        }
        // A calibration of another model's heads is refused, fewer heads or more.
        for heads in [2, 8] {
            let other = Calibration::new(l, heads, d);
            let e = shard.calibration(&model, &other).unwrap_err();
            assert!(e.to_string().contains("the model has (3, 4, 64)"), "{e}");
        }
        // A range of no heads, or past the calibration's, is refused by the slicing itself.
        for (start, end) in [(1, 1), (3, 5)] {
            let e = full.kv_heads(start..end).unwrap_err().to_string();
            assert!(
                e.contains(&format!("KV heads {start}..{end} of a calibration of 4")),
                "{e}"
            );
        }
    }
}
