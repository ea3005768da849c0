//! The launcher <-> agent protocol (filled in by the sessions work, issue 4).
