//! Against a real llama.cpp server (filled below).
