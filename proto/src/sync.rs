//! Locks that survive a panic elsewhere.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, taking the data as it is if a thread panicked while holding
/// it: every mutex in stampede guards data that stays consistent between
/// statements (maps, counters, handles), so a poisoned lock is no reason to
/// take the whole server down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads `l` the same way: a panicked writer leaves the last whole value.
pub fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Writes `l` the same way.
pub fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
