/* cli/cmd_tokenize.c: `kvcal tokenize` -- a dataset to token ids with the
 * model's own tokenizer: an HDF5 token set of samples (what calibration
 * reads back), or JSONL with one {"input_ids": [...]} per input document in
 * input order, to diff against an engine's ids. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cmd_common.h"
#include "cli/cmd_outputs.h"
#include "cli/cmd_progress.h"
#include "cli/command.h"
#include "core/status.h"
#include "io/atomic_file.h"
#include "io/dataset/dataset.h"
#include "io/file_kind.h"
#include "io/tokenizer/tokenizer.h"

static void tokenize_usage(FILE *f)
{
    fprintf(
        f,
        "usage: kvcal tokenize --dataset PATH --output PATH (--model PATH | --tokenizer "
        "PATH) [options]\n"
        "\n"
        "Tokenizes a dataset with the model's own tokenizer.\n"
        "\n"
        "  -d, --dataset PATH     text file (documents split on blank lines), directory\n"
        "                         (one document per file), .jsonl (text field, chat\n"
        "                         \"messages\" or \"input_ids\") or .h5 token set;\n"
        "                         kvcal's default text is "
        "datasets/default_calibration.txt\n"
        "  -o, --output PATH      file to write (atomically: a temporary beside it,\n"
        "                         renamed into place once whole; never one of the\n"
        "                         inputs; a symbolic link is written through)\n"
        "  -m, --model PATH       model directory or file; its tokenizer is found beside "
        "it\n"
        "                         (tokenizer.json, tokenizer.model, tokenizer.bin, "
        "tok*.bin)\n"
        "  -t, --tokenizer PATH   tokenizer file (overrides the one found with --model)\n"
        "      --format FMT       hdf5 (default): samples, input_ids [N, L] int32 + "
        "lengths;\n"
        "                         jsonl: one {\"input_ids\": [...]} per document, input "
        "order,\n"
        "                         unpacked (sampling options are ignored)\n"
        "      --text-field NAME  JSONL field holding the text (default \"text\")\n"
        "  -n, --num-samples N    samples to write (default: as many as the data fills)\n"
        "  -l, --seq-len L        tokens per sample (default 2048)\n"
        "      --seed S           document shuffling seed (default 0)\n"
        "      --no-pack          one document per sample (cut at L, padded with -1)\n"
        "                         instead of packing documents into L-token windows\n"
        "      --json             print a JSON report on stdout\n"
        "  -q, --quiet            no progress line and no summary on stderr (progress:\n"
        "                         on a terminal a line rewritten in place, elsewhere a\n"
        "                         plain line every $KVCAL_PROGRESS_INTERVAL seconds,\n"
        "                         default 10, and at the end)\n"
        "  -h, --help             this help\n"
        "\n"
        "Special tokens follow the tokenizer's configuration (BOS per document; a\n"
        "packed window that does not start with BOS gets one). Text must be UTF-8.\n"
        "exit codes: 0 ok, 1 invalid input, 2 usage or I/O error\n");
}

/* The progress line, fed by the dataset reader; the last counts it saw. */
typedef struct progress_line {
    kvcal_cmd_progress p;
    long long done, total, tokens;
    int final_shown; /* the line of done == total was printed */
} progress_line;

static void show_progress(void *ctx, long long done, long long total, long long tokens)
{
    progress_line *pl = ctx;
    pl->done = done, pl->total = total, pl->tokens = tokens;
    double elapsed = kvcal_cmd_progress_elapsed(&pl->p);
    pl->final_shown =
        kvcal_cmd_progress_update(
            &pl->p, 0,
            "kvcal tokenize: %lld/%lld documents, %lld tokens, %.0f tokens/s, at most "
            "%.0f s left",
            done, total, tokens, elapsed > 0 ? (double)tokens / elapsed : 0.0,
            done ? elapsed * (double)(total - done) / (double)done : 0.0) &&
        done == total;
}

/* The last line: every document read. */
static void show_final_progress(progress_line *pl)
{
    if (!pl->total || pl->final_shown)
        return;
    double elapsed = kvcal_cmd_progress_elapsed(&pl->p);
    kvcal_cmd_progress_update(&pl->p, 1,
                              "kvcal tokenize: %lld/%lld documents, %lld tokens, %.0f "
                              "tokens/s, at most 0 s left",
                              pl->total, pl->total, pl->tokens,
                              elapsed > 0 ? (double)pl->tokens / elapsed : 0.0);
}

/* Whether `output` is one of the inputs (dataset, tokenizer, model files):
 * -1 with the message printed. */
static int check_output(const char *output, const char *dataset, const char *model,
                        const char *tok_path)
{
    kvcal_inputs_t *in = NULL;
    kvcal_status st = kvcal_atomic_check(output);
    if (!st)
        st = kvcal_inputs_create(&in);
    if (!st)
        st = kvcal_inputs_add(in, dataset, "the dataset", NULL);
    if (!st && tok_path)
        st = kvcal_inputs_add(in, tok_path, "the tokenizer", NULL);
    if (!st && model)
        st = kvcal_cmd_add_model_inputs(in, model);
    if (!st)
        st = kvcal_inputs_check(in, "--output", output);
    kvcal_inputs_destroy(in);
    if (st)
        fprintf(stderr, "kvcal tokenize: %s\n", kvcal_last_error());
    return st ? -1 : 0;
}

/* A packed window starts with BOS: --seq-len 1 would leave no room for
 * text (every window BOS alone, never filled). Token ids are taken
 * verbatim (no BOS added), so they fit any length. */
static kvcal_status check_window_room(const char *dataset, const kvcal_tokenizer_t *tok,
                                      int seq_len, int pack)
{
    kvcal_file_kind kind;
    if (!pack || seq_len > 1 || !kvcal_tokenizer_adds_bos(tok) ||
        kvcal_tokenizer_bos(tok) < 0 ||
        (kvcal_file_kind_detect(dataset, &kind) == KVCAL_OK &&
         (kind == KVCAL_FILE_TOKENS_HDF5 || kind == KVCAL_FILE_TOKENS_JSONL)))
        return KVCAL_OK;
    return kvcal_fail(KVCAL_ERR_INVALID_ARG,
                      "--seq-len %d leaves no room for text: each packed window starts "
                      "with the tokenizer's BOS (id %d); give --seq-len 2 or more, or "
                      "--no-pack",
                      seq_len, (int)kvcal_tokenizer_bos(tok));
}

/* One {"input_ids": [...]} line per document. */
static kvcal_status write_jsonl(const char *path, const kvcal_documents *d)
{
    kvcal_atomic_file af;
    kvcal_status st = kvcal_atomic_open(&af, path);
    if (st)
        return st;
    for (int i = 0; i < d->num_docs; i++) {
        fputs("{\"input_ids\": [", af.f);
        for (size_t k = 0; k < d->lengths[i]; k++)
            fprintf(af.f, k ? ", %d" : "%d", d->ids[i][k]);
        fputs("]}\n", af.f);
    }
    if (ferror(af.f)) {
        kvcal_atomic_abort(&af);
        return kvcal_fail(KVCAL_ERR_IO, "%s: write failed (disk full?)", path);
    }
    return kvcal_atomic_commit(&af);
}

KVCAL_COMMAND(tokenize, "tokenize", "tokenize a dataset: HDF5 token set or JSONL ids");

int kvcal_cmd_tokenize(int argc, char **argv)
{
    enum { OPT_FORMAT = 256, OPT_TEXT_FIELD, OPT_SEED, OPT_NO_PACK, OPT_JSON };
    static const struct option opts[] = {
        {"dataset", required_argument, NULL, 'd'},
        {"output", required_argument, NULL, 'o'},
        {"model", required_argument, NULL, 'm'},
        {"tokenizer", required_argument, NULL, 't'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"text-field", required_argument, NULL, OPT_TEXT_FIELD},
        {"num-samples", required_argument, NULL, 'n'},
        {"seq-len", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"no-pack", no_argument, NULL, OPT_NO_PACK},
        {"json", no_argument, NULL, OPT_JSON},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dataset = NULL, *output = NULL, *model = NULL, *tok_path = NULL;
    const char *format = "hdf5", *text_field = NULL;
    long long num_samples = 0, seq_len = 2048, seed = 0;
    int pack = 1, json = 0, quiet = 0, c;
    kvcal_cmd_seen_options seen = 0;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":d:o:m:t:n:l:qh", opts, NULL)) != -1) {
        if (kvcal_cmd_mark_option("tokenize", opts, c, optarg, &seen))
            return KVCAL_EXIT_USAGE;
        switch (c) {
        case 'd':
            if (kvcal_cmd_parse_path("tokenize", "--dataset", optarg, &dataset))
                return KVCAL_EXIT_USAGE;
            break;
        case 'o':
            if (kvcal_cmd_parse_path("tokenize", "--output", optarg, &output))
                return KVCAL_EXIT_USAGE;
            break;
        case 'm':
            if (kvcal_cmd_parse_path("tokenize", "--model", optarg, &model))
                return KVCAL_EXIT_USAGE;
            break;
        case 't':
            if (kvcal_cmd_parse_path("tokenize", "--tokenizer", optarg, &tok_path))
                return KVCAL_EXIT_USAGE;
            break;
        case OPT_FORMAT:
            format = optarg;
            break;
        case OPT_TEXT_FIELD:
            text_field = optarg;
            break;
        case 'n':
            if (kvcal_cmd_parse_ll("tokenize", "--num-samples", optarg, 1,
                                   KVCAL_CMD_INT_MAX, &num_samples))
                return KVCAL_EXIT_USAGE;
            break;
        case 'l':
            if (kvcal_cmd_parse_ll("tokenize", "--seq-len", optarg, 1, 1 << 24, &seq_len))
                return KVCAL_EXIT_USAGE;
            break;
        case OPT_SEED:
            if (kvcal_cmd_parse_ll("tokenize", "--seed", optarg, 0, LLONG_MAX, &seed))
                return KVCAL_EXIT_USAGE;
            break;
        case OPT_NO_PACK:
            pack = 0;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            tokenize_usage(stdout);
            return KVCAL_EXIT_OK;
        case ':':
            fprintf(stderr, "kvcal tokenize: %s needs a value (see --help)\n",
                    argv[optind - 1]);
            return KVCAL_EXIT_USAGE;
        default:
            fprintf(stderr, "kvcal tokenize: unknown option '%s' (see --help)\n",
                    argv[optind - 1]);
            return KVCAL_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "kvcal tokenize: unexpected argument '%s' (see --help)\n",
                argv[optind]);
        return KVCAL_EXIT_USAGE;
    }
    int jsonl = !strcmp(format, "jsonl");
    if (!jsonl && strcmp(format, "hdf5")) {
        fprintf(stderr, "kvcal tokenize: --format must be hdf5 or jsonl, got '%s'\n",
                format);
        return KVCAL_EXIT_USAGE;
    }
    if (!dataset || !output || (!model && !tok_path)) {
        fprintf(stderr,
                "kvcal tokenize: needs --dataset, --output and --model or --tokenizer "
                "(see --help)\n");
        return KVCAL_EXIT_USAGE;
    }
    if (check_output(output, dataset, model, tok_path))
        return KVCAL_EXIT_USAGE;
    kvcal_tokenizer_t *tok = NULL;
    kvcal_documents *docs = NULL;
    kvcal_samples *samples = NULL;
    progress_line pl = {0};
    kvcal_status st = kvcal_tokenizer_find(model, tok_path, &tok);
    if (st || (!jsonl && (st = check_window_room(dataset, tok, (int)seq_len, pack))))
        goto fail;
    long long tokens = 0;
    int n_docs = 0;
    kvcal_cmd_progress_start(&pl.p, quiet, 0.25);
    kvcal_dataset_options opt = {.num_samples = (int)num_samples,
                                 .seq_len = (int)seq_len,
                                 .seed = (uint64_t)seed,
                                 .pack = pack,
                                 .text_field = text_field};
    kvcal_dataset_progress prog = {show_progress, &pl};
    const kvcal_dataset_progress *progress = quiet ? NULL : &prog;
    if (jsonl) {
        if ((st = kvcal_dataset_tokenize_documents(dataset, tok, text_field, progress,
                                                   &docs)) ||
            (st = write_jsonl(output, docs)))
            goto fail;
        n_docs = docs->num_docs;
        for (int i = 0; i < n_docs; i++)
            tokens += (long long)docs->lengths[i];
    } else {
        kvcal_token_provenance prov = {.source = dataset,
                                       .tokenizer = tok_path ? tok_path : model,
                                       .tokenizer_kind = kvcal_tokenizer_kind(tok),
                                       .seed = (uint64_t)seed,
                                       .pack = pack};
        if ((st = kvcal_dataset_load_progress(dataset, tok, &opt, progress, &samples)) ||
            (st = kvcal_samples_write_hdf5(output, samples, &prov)))
            goto fail;
        tokens = samples->num_tokens;
    }
    show_final_progress(&pl);
    kvcal_cmd_progress_end(&pl.p);
    if (!quiet) {
        if (jsonl)
            fprintf(stderr, "kvcal tokenize: %d documents, %lld tokens (%s) -> %s\n",
                    n_docs, tokens, kvcal_tokenizer_kind(tok), output);
        else
            fprintf(
                stderr,
                "kvcal tokenize: %d samples x %d tokens, %lld tokens (%s, %s) -> %s\n",
                samples->num_samples, samples->seq_len, tokens, kvcal_tokenizer_kind(tok),
                pack ? "packed" : "one document per sample", output);
    }
    if (json) {
        printf("{\"output\": \"");
        for (const char *p = output; *p; p++) {
            if (*p == '"' || *p == '\\')
                putchar('\\');
            putchar((unsigned char)*p < 0x20 ? '?' : *p);
        }
        printf("\", \"format\": \"%s\", \"tokenizer_kind\": \"%s\", \"tokens\": %lld",
               format, kvcal_tokenizer_kind(tok), tokens);
        if (jsonl)
            printf(", \"documents\": %d}\n", n_docs);
        else
            printf(
                ", \"num_samples\": %d, \"seq_len\": %d, \"pack\": %s, \"seed\": %lld}\n",
                samples->num_samples, samples->seq_len, pack ? "true" : "false", seed);
    }
    kvcal_documents_destroy(docs);
    kvcal_samples_destroy(samples);
    kvcal_tokenizer_destroy(tok);
    return KVCAL_EXIT_OK;
fail:
    kvcal_cmd_progress_end(&pl.p);
    fprintf(stderr, "kvcal tokenize: %s\n", kvcal_last_error());
    kvcal_documents_destroy(docs);
    kvcal_samples_destroy(samples);
    kvcal_tokenizer_destroy(tok);
    return kvcal_cmd_file_exit_code(st);
}
