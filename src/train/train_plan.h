/*
 * train_plan.h - what the options of `blockfp8 train` resolve to: the
 * preset, the recipe, the checkpoint to resume from, the paths, and every
 * unset option filled in from the preset (or, on --resume, the checkpoint).
 */
#ifndef BFP8_TRAIN_TRAIN_PLAN_H
#define BFP8_TRAIN_TRAIN_PLAN_H

#include "blockfp8.h"
#include "model/model_config.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

typedef struct train_plan {
    const model_preset *preset;
    bfp8_recipe recipe;
    checkpoint_info resume_info; /* o->resume: the header of resume_path */
    char resume_path[4096];
    /* what o's path options point to when they were not given */
    char tokenizer_path[4096], checkpoint_dir[4096], metrics_path[4200];
} train_plan;

/* Resolve o in place (its unset paths pointing into plan). Returns 0, or an
 * exit code after a one-line message on stderr: 2 for a bad command line
 * (unknown names, options that do not go together, a --seq the model cannot
 * take), 1 for a checkpoint to resume from that cannot be read or does not
 * fit. Reads nothing but the header of the checkpoint to resume from. */
int train_plan_resolve(train_options *o, train_plan *plan);

/* A fresh run (no --resume, no --overwrite) never replaces the checkpoint of
 * another run in its directory: 2 with a message if one is there, else 0. */
int train_plan_check_fresh(const train_options *o);

#endif /* BFP8_TRAIN_TRAIN_PLAN_H */
