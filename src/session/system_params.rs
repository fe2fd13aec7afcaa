//! Server-wide settings: `ALTER SYSTEM SET name = value` changes one for every session
//! at once and records it in the state store (it outlives restarts and wins over the
//! command-line default); `SHOW name` reads it.

use super::{Engine, Outcome, text_rows};
use crate::error::{EddyError, Result, sqlstate};
use crate::sql::alter_system::AlterSystem;
use rocksdb::WriteBatch;

/// The settings `ALTER SYSTEM` knows.
const BARRIER_INTERVAL_MS: &str = "barrier_interval_ms";

fn state_key(name: &str) -> Vec<u8> {
    let mut key = crate::state::keys::table_prefix(crate::state::store::SYSTEM_TABLE_ID).to_vec();
    key.extend_from_slice(&[0, 0]);
    key.extend_from_slice(format!("system_param/{name}").as_bytes());
    key
}

fn unknown(name: &str) -> EddyError {
    EddyError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("unrecognized system parameter \"{name}\" (known: {BARRIER_INTERVAL_MS})"),
    )
}

fn parse_interval(value: &str) -> Result<u64> {
    value
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| {
            EddyError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "invalid value for parameter \"{BARRIER_INTERVAL_MS}\": \"{value}\" (a positive number of milliseconds)"
                ),
            )
        })
}

/// `ALTER SYSTEM SET`.
pub(super) fn alter(engine: &Engine, alter: &AlterSystem) -> Result<Outcome> {
    if alter.name != BARRIER_INTERVAL_MS {
        return Err(unknown(&alter.name));
    }
    let ms = parse_interval(&alter.value)?;
    let mut batch = WriteBatch::default();
    batch.put(state_key(BARRIER_INTERVAL_MS), ms.to_string());
    engine.store.write(batch)?;
    engine.checkpoints.set_barrier_interval_ms(ms);
    Ok(Outcome::Command("ALTER_SYSTEM".into()))
}

/// `SHOW name` for a system parameter; `None` when `name` is not one.
pub(super) fn show(engine: &Engine, name: &str) -> Option<Result<Outcome>> {
    name.eq_ignore_ascii_case(BARRIER_INTERVAL_MS).then(|| {
        text_rows(
            BARRIER_INTERVAL_MS,
            vec![engine.checkpoints.barrier_interval_ms().to_string()],
        )
    })
}

/// Applies the settings recorded by earlier `ALTER SYSTEM` statements.
pub(super) fn load(engine: &Engine) -> Result<()> {
    if let Some(value) = engine.store.get(&state_key(BARRIER_INTERVAL_MS))? {
        let value = String::from_utf8_lossy(&value);
        engine
            .checkpoints
            .set_barrier_interval_ms(parse_interval(&value)?);
    }
    Ok(())
}
