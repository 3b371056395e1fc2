//! netattach
