/*
 * tokenizer_setup.h - load the run's BPE tokenizer, or train and save it.
 */
#ifndef BFP8_TRAIN_TOKENIZER_SETUP_H
#define BFP8_TRAIN_TOKENIZER_SETUP_H

#include <stdint.h>

#include "blockfp8.h"
#include "train/tokenizer.h"

/* The tokenizer of tokenizer_path; when that file does not exist, a vocab-token
 * BPE trained on data_path (progress on stdout) and saved there (directories
 * made). vocab_wanted > 0: a loaded tokenizer of another size is refused. */
bfp8_status tokenizer_load_or_train(bpe_tokenizer *tok, const char *tokenizer_path, const char *data_path,
                                    int64_t vocab_wanted, int64_t vocab);

#endif /* BFP8_TRAIN_TOKENIZER_SETUP_H */
