//! Autotune records: what `autotune` measured on one GPU model, and how the runtime finds and
//! reads the record of the GPU it runs on (SPEC §9, DESIGN "Tuning and its records").
//!
//! - [`record`]: the record ([`TuningRecord`]): a metadata header, every candidate's timing and
//!   the winner per (family, shape, placement, context bucket); it implements
//!   [`crate::step::Tuning`], so a decoder reads its tiles and transfer from it.
//! - [`meta`]: the header ([`RecordMeta`]) and why a record does not fit ([`MetaMismatch`]).
//! - [`locate`]: where records live and how the one for this GPU is chosen
//!   ([`locate::find_record`]).

pub mod locate;
pub mod meta;
pub mod record;

pub use locate::{
    find_record, record_file_name, record_for, search_dirs, Located, EMBEDDED_DIR, TUNING_DIR_VAR,
};
pub use meta::{MetaCheck, MetaMismatch, RecordMeta};
pub use record::{
    CandidateRecord, EntryKey, EntryRecord, Outcome, RecordError, Subject, TuningRecord, Variant,
    Winner,
};
