mod doctor;
mod knobs;
