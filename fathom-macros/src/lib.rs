//! `fathom-macros`: renders a list of kernel specs at build time into embedded CUDA sources and
//! typed launch functions.
