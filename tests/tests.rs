mod common;

mod doctor;
mod knobs;
