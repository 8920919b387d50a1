//! Autotune records: what `autotune` measured on one GPU model, and how the runtime finds and
//! reads the record of the GPU it runs on (SPEC §9, DESIGN "Tuning and its records").
//!
//! - [`tiles`]: the vocabulary the step looks its launches up in ([`TunedFamily`], [`TuneKey`],
//!   [`Tile`], the [`Tuning`] trait, the default [`Tiles`], [`context_bucket`]) and [`transfer`],
//!   the host-placement [`Transfer`];
//! - [`record`]: the record ([`TuningRecord`]): a metadata header, every candidate's timing and
//!   the winner per (family, shape, placement, context bucket); it implements [`Tuning`], so a
//!   decoder reads its tiles and transfer from it.
//! - [`meta`]: the header ([`RecordMeta`]) and why a record does not fit ([`MetaMismatch`]).
//! - [`locate`]: where records live and how the one for this GPU is chosen
//!   ([`locate::find_record`]).

pub mod locate;
pub mod meta;
pub mod record;
pub mod tiles;
pub mod transfer;

pub use locate::{
    find_record, record_file_name, record_for, search_dirs, Located, EMBEDDED_DIR, TUNING_DIR_VAR,
};
pub use meta::{MetaCheck, MetaMismatch, RecordMeta};
pub use record::{
    CandidateRecord, EntryKey, EntryRecord, Outcome, RecordError, Subject, TuningRecord, Variant,
    Winner,
};
pub use tiles::{context_bucket, fit_scan_tile, Tile, Tiles, TuneKey, TunedFamily, Tuning};
pub(crate) use tiles::{warn_partly_tuned, warn_untuned};
pub use transfer::Transfer;
