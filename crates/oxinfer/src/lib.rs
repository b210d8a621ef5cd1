//! oxinfer engine.
