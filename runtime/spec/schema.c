/*
 * The job-file schema table and the reference generated from it.
 *
 * Everything a user can write in a job file is listed here once, with the
 * sentence that documents it.  spec.c validates against these entries and
 * reads defaults from them (the `def` text goes through the same parser as
 * values from the file), so changing a default or a range here changes
 * the checks, the converted ar_spec and docs/job-file.md together.
 */
#include "schema.h"

#include "accelrt/spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Shorthands that keep the table readable. */
#define INT_RANGE(lo, hi) .type = AR__S_INT, .imin = (lo), .imax = (hi)
#define FLOAT_RANGE(lo, lo_open, hi, hi_open)                                  \
  .type = AR__S_FLOAT, .fmin = (lo), .fmin_open = (lo_open), .fmax = (hi),     \
  .fmax_open = (hi_open)
#define FLOAT_ABOVE(lo) FLOAT_RANGE(lo, true, INFINITY, false)
#define FLOAT_FROM(lo) FLOAT_RANGE(lo, false, INFINITY, false)
#define FRACTION FLOAT_RANGE(0.0, false, 1.0, true) /* [0, 1) */

/* Widths and feature/label counts index int32 arrays downstream. */
#define COUNT_MAX INT32_MAX

/* ---- model ------------------------------------------------------------- */

static const ar__schema input_keys[] = {
    {.key = "sparse",
     INT_RANGE(1, COUNT_MAX),
     .doc = "Number of input features; each point is a sparse row of "
            "`feature:value` pairs (the xc and libsvm formats)."},
    {.key = "dense",
     INT_RANGE(1, COUNT_MAX),
     .doc = "Number of input features; each point is used as a dense vector "
            "of this length."},
    {0}};

static const ar__srule input_rules[] = {
    {AR__R_ONE_OF, "sparse", "dense", "the input is either sparse or dense"},
    {0}};

/* spec.c maps these by position to ar_act (see convert_model). */
static const char *const act_values[] = {"relu", "sigmoid", "none", "softmax",
                                         NULL};

static const ar__schema layer_keys[] = {
    {.key = "name",
     .type = AR__S_NAME,
     .def_doc = "`layer<i>`, with i the position in the list counted from 0",
     .doc = "Names the layer in summaries, checkpoints and `--set` paths "
            "(`model.layers.NAME.dense=...`). Names must be unique."},
    {.key = "dense",
     INT_RANGE(1, COUNT_MAX),
     .required = true,
     .doc = "Output width: the number of neurons. The last layer's width is "
            "the number of labels."},
    {.key = "activation",
     .type = AR__S_ENUM,
     .values = act_values,
     .def_doc = "`relu`; `softmax` on the last layer",
     .doc = "The last layer's activation picks the loss and must be `softmax` "
            "(softmax cross-entropy over the labels) or `sigmoid` (binary "
            "cross-entropy per label). `softmax` is only allowed on the last "
            "layer."},
    {.key = "sparse",
     .type = AR__S_RESERVED,
     .reserved_msg = "LSH-sampled layers are not available in this build yet",
     .doc = "Reserved for LSH-sampled layers (SLIDE); not available in this "
            "build yet."},
    {0}};

static const ar__schema layer_item[] = {{.key = "item",
                                         .type = AR__S_MAP,
                                         .kids = layer_keys,
                                         .doc = "One fully connected layer."},
                                        {0}};

static const ar__schema model_keys[] = {
    {.key = "input",
     .type = AR__S_MAP,
     .required = true,
     .kids = input_keys,
     .rules = input_rules,
     .doc = "The shape of one input point: exactly one of `sparse: N` or "
            "`dense: N`. With `data.generate`, N must equal "
            "`data.generate.features`."},
    {.key = "layers",
     .type = AR__S_LIST,
     .required = true,
     .min_items = 1,
     .kids = layer_item,
     .doc = "The layers from input to output, at least one. The last one is "
            "the output layer; with `data.generate` its width must equal "
            "`data.generate.labels`."},
    {0}};

/* ---- data -------------------------------------------------------------- */

static const ar__schema generate_keys[] = {
    {.key = "train_points",
     INT_RANGE(1, INT64_MAX),
     .def = "20000",
     .doc = "Points in the generated training set."},
    {.key = "test_points",
     INT_RANGE(0, INT64_MAX),
     .def = "2000",
     .doc = "Points in the generated test set; 0 for none."},
    {.key = "features",
     INT_RANGE(1, COUNT_MAX),
     .required = true,
     .doc = "Feature count; must equal the N of `model.input`."},
    {.key = "labels",
     INT_RANGE(1, COUNT_MAX),
     .required = true,
     .doc = "Label count; must equal the width of the last layer."},
    {.key = "nnz",
     INT_RANGE(1, INT32_MAX),
     .def = "20",
     .doc = "Average number of non-zero features per point."},
    {.key = "labels_per_point",
     INT_RANGE(1, INT32_MAX),
     .def = "2",
     .doc = "Average number of labels per point."},
    {.key = "noise",
     FLOAT_RANGE(0.0, false, 1.0, false),
     .def = "0.1",
     .doc = "Fraction of each point's features drawn at random instead of "
            "from its labels' planted structure."},
    {0}};

/* By position: AR_FMT_XC, AR_FMT_LIBSVM. */
static const char *const format_values[] = {"xc", "libsvm", NULL};

static const ar__schema data_keys[] = {
    {.key = "train",
     .type = AR__S_PATH,
     .doc = "Training data file. A relative path is taken from the job "
            "file's folder (from the working directory when given with "
            "`--set`)."},
    {.key = "test",
     .type = AR__S_PATH,
     .doc = "Test data file, resolved like `train`. Without it there is no "
            "test evaluation."},
    {.key = "format",
     .type = AR__S_ENUM,
     .values = format_values,
     .def = "xc",
     .doc = "`xc`: the Extreme Classification Repository format (a header "
            "line `points features labels`, then `l1,l2 f:v f:v` per point, "
            "0-based ids). `libsvm`: no header, feature ids 1-based."},
    {.key = "shuffle_window",
     INT_RANGE(0, INT64_MAX),
     .def = "65536",
     .doc = "Rows shuffled together while streaming the training file; 0 "
            "keeps the file order."},
    {.key = "generate",
     .type = AR__S_MAP,
     .kids = generate_keys,
     .doc = "Generate a synthetic extreme-classification dataset with planted "
            "structure before training, instead of reading files."},
    {0}};

static const ar__srule data_rules[] = {
    {AR__R_ONE_OF, "train", "generate",
     "the training data comes from a file or from the generator"},
    {AR__R_CONFLICT, "test", "generate",
     "the generator writes its own test set"},
    {0}};

/* ---- train ------------------------------------------------------------- */

static const ar__schema adam_keys[] = {
    {.key = "lr", FLOAT_ABOVE(0.0), .def = "0.001", .doc = "Learning rate."},
    {.key = "beta1",
     FRACTION,
     .def = "0.9",
     .doc = "Decay of the first-moment (mean) estimate."},
    {.key = "beta2",
     FRACTION,
     .def = "0.999",
     .doc = "Decay of the second-moment (variance) estimate."},
    {.key = "eps",
     FLOAT_ABOVE(0.0),
     .def = "1e-8",
     .doc = "Added to the root of the second moment to avoid division by 0."},
    {.key = "weight_decay",
     FLOAT_FROM(0.0),
     .def = "0",
     .doc = "L2 penalty added to the gradient."},
    {0}};

static const ar__schema sgd_keys[] = {
    {.key = "lr", FLOAT_ABOVE(0.0), .def = "0.1", .doc = "Learning rate."},
    {.key = "momentum",
     FRACTION,
     .def = "0.9",
     .doc = "Momentum; 0 for plain SGD."},
    {.key = "weight_decay",
     FLOAT_FROM(0.0),
     .def = "0",
     .doc = "L2 penalty added to the gradient."},
    {0}};

static const ar__schema optimizer_kinds[] = {
    {.key = "adam",
     .type = AR__S_MAP,
     .kids = adam_keys,
     .doc = "Adam (Kingma & Ba, 2015)."},
    {.key = "sgd",
     .type = AR__S_MAP,
     .kids = sgd_keys,
     .doc = "Stochastic gradient descent with momentum."},
    {0}};

/* By position: ar_init_kind (AR_INIT_AUTO, AR_INIT_HE, AR_INIT_XAVIER). */
static const char *const init_values[] = {"auto", "he", "xavier", NULL};

static const ar__schema train_keys[] = {
    {.key = "batch",
     INT_RANGE(1, 1048576),
     .def = "128",
     .doc = "Points per iteration."},
    {.key = "epochs",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Passes over the training data. At least one of `epochs` and "
            "`iterations` must be above 0; with both, training stops at the "
            "first one reached."},
    {.key = "iterations",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Iterations (batches) to run; see `epochs`."},
    {.key = "threads",
     INT_RANGE(0, INT32_MAX),
     .def = "0",
     .doc = "Host threads; 0 uses all cores."},
    {.key = "optimizer",
     .type = AR__S_VARIANT,
     .kids = optimizer_kinds,
     .def = "adam",
     .doc = "`adam` or `sgd` with their defaults, or a mapping with one of "
            "them as its only key to set their parameters, e.g. "
            "`{sgd: {lr: 0.05}}`."},
    {.key = "init",
     .type = AR__S_ENUM,
     .values = init_values,
     .def = "auto",
     .doc = "Weight initialisation: `he` (for relu layers), `xavier`, or "
            "`auto` (He for relu layers, Xavier for the others)."},
    {.key = "eval_every",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Evaluate on the test set every this many iterations; 0 only at "
            "the end."},
    {.key = "eval_points",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "At most this many test points per evaluation; 0 uses all."},
    {.key = "checkpoint_every",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Write a checkpoint every this many iterations; 0 only at the "
            "end."},
    {0}};

/* ---- output and the top level ------------------------------------------ */

static const ar__schema output_keys[] = {
    {.key = "dir",
     .type = AR__S_PATH,
     .def_doc = "`runs/<name>`",
     .doc = "Folder for metrics, checkpoints and traces, relative to the "
            "working directory (not to the job file)."},
    {0}};

static const ar__schema top_keys[] = {
    {.key = "name",
     .type = AR__S_NAME,
     .def_doc = "the job file's name without its extension",
     .doc = "Names the job in logs, metrics and the default output folder."},
    {.key = "device",
     .type = AR__S_DEVICE,
     .def = "auto",
     .doc = "Where the job runs: `host` (the CPU cores), `cuda:N` (CUDA "
            "device N, from 0), or `auto` (the first CUDA device when one is "
            "present, the host otherwise)."},
    {.key = "seed",
     INT_RANGE(0, INT64_MAX),
     .def = "1",
     .doc = "Seeds initialisation, shuffling and data generation, so that a "
            "run can be repeated."},
    {.key = "model",
     .type = AR__S_MAP,
     .required = true,
     .kids = model_keys,
     .doc = "The network."},
    {.key = "data",
     .type = AR__S_MAP,
     .required = true,
     .kids = data_keys,
     .rules = data_rules,
     .doc = "Where the points come from: exactly one of `train` (files) or "
            "`generate` (synthetic)."},
    {.key = "train",
     .type = AR__S_MAP,
     .required = true,
     .kids = train_keys,
     .doc = "How long and how to train."},
    {.key = "output",
     .type = AR__S_MAP,
     .kids = output_keys,
     .doc = "Where results go."},
    {.key = "runtime",
     .type = AR__S_RESERVED,
     .reserved_msg = "not available in this build yet (see the "
                     "lanes/commsched issue)",
     .doc = "Reserved for the multi-tenant runtime (GPU lanes); not "
            "available in this build yet."},
    {.key = "distributed",
     .type = AR__S_RESERVED,
     .reserved_msg = "not available in this build yet (see the "
                     "lanes/commsched issue)",
     .doc = "Reserved for distributed training with communication "
            "scheduling; not available in this build yet."},
    {.key = "jobs",
     .type = AR__S_RESERVED,
     .reserved_msg = "not available in this build yet (see the "
                     "lanes/commsched issue)",
     .doc = "Reserved for multi-job files; not available in this build "
            "yet."},
    {0}};

static const ar__schema root_entry = {
    .key = "",
    .type = AR__S_MAP,
    .kids = top_keys,
    .doc = "A job file is one YAML mapping with these keys."};

const ar__schema *ar__schema_root(void) { return &root_entry; }

const ar__schema *ar__schema_kid(const ar__schema *parent, const char *key,
                                 size_t len) {
  if (!parent || !parent->kids)
    return NULL;
  for (const ar__schema *k = parent->kids; k->key; k++)
    if (strlen(k->key) == len && memcmp(k->key, key, len) == 0)
      return k;
  return NULL;
}

char *ar__schema_range_text(const ar__schema *s, char *buf, size_t cap) {
  buf[0] = '\0';
  if (s->type == AR__S_INT) {
    if (s->imax == INT64_MAX)
      snprintf(buf, cap, ">= %" PRId64, s->imin);
    else
      snprintf(buf, cap, "between %" PRId64 " and %" PRId64, s->imin, s->imax);
  } else if (s->type == AR__S_FLOAT) {
    bool lo = isfinite(s->fmin), hi = isfinite(s->fmax);
    if (lo && hi && !s->fmin_open && !s->fmax_open)
      snprintf(buf, cap, "between %g and %g", s->fmin, s->fmax);
    else if (lo && hi)
      snprintf(buf, cap, "%s %g and %s %g", s->fmin_open ? ">" : ">=", s->fmin,
               s->fmax_open ? "<" : "<=", s->fmax);
    else if (lo)
      snprintf(buf, cap, "%s %g", s->fmin_open ? ">" : ">=", s->fmin);
    else if (hi)
      snprintf(buf, cap, "%s %g", s->fmax_open ? "<" : "<=", s->fmax);
  }
  return buf;
}

/* ---- the reference ------------------------------------------------------ */

const char ar__spec_example[] =
    "# A small extreme-classification job on a generated dataset.\n"
    "name: quickstart\n"
    "device: auto              # auto | host | cuda:N\n"
    "seed: 1\n"
    "model:\n"
    "  input: {sparse: 5000}   # 5000 features per point, given sparse\n"
    "  layers:\n"
    "    - {name: hidden, dense: 128, activation: relu}\n"
    "    - name: out\n"
    "      dense: 1000         # one neuron per label\n"
    "      activation: softmax # the last layer picks the loss\n"
    "data:\n"
    "  generate: {train_points: 20000, test_points: 2000, features: 5000, "
    "labels: 1000}\n"
    "  # or read files, relative to this file's folder:\n"
    "  # train: data/train.txt\n"
    "  # test: data/test.txt\n"
    "  # format: xc\n"
    "train:\n"
    "  batch: 128\n"
    "  epochs: 2\n"
    "  optimizer: {adam: {lr: 0.001}}\n"
    "  eval_every: 500\n"
    "output:\n"
    "  dir: runs/quickstart\n";

static const char md_intro[] =
    "# Job file reference\n"
    "\n"
    "<!-- Generated by ar_spec_schema_markdown() from runtime/spec/schema.c; "
    "do not edit.\n"
    "     Regenerate: accelrt schema > docs/job-file.md\n"
    "     (or, without the CLI: build/tests/spec/test_spec --print-schema) "
    "-->\n"
    "\n"
    "A job file describes one training job in YAML: the network, the data, "
    "how to train\n"
    "and where results go. `accelrt run JOB.yaml` reads it, checks every "
    "key against the\n"
    "table below and reports all problems at once, each as\n"
    "`FILE:LINE:COL: error: KEY.PATH: message`.\n"
    "\n"
    "## Example\n"
    "\n"
    "```yaml\n";

static const char md_rules[] =
    "```\n"
    "\n"
    "## Rules\n"
    "\n"
    "- Integers are whole decimal numbers (a leading `+` or `-` is allowed; "
    "`1.5`, `1e3` and\n"
    "  `0x10` are not). Numbers are decimal, with an optional exponent "
    "(`1e-4`), and finite.\n"
    "  A quoted value (`\"128\"`) is a string, never a number.\n"
    "- An empty value (`key:` with nothing after it) is an error: leave the "
    "key out to get\n"
    "  its default.\n"
    "- Unknown keys are errors, with a suggestion when a known key is "
    "close.\n"
    "- Anchors and aliases (`&a`, `*a`), tags (`!!str`), several documents "
    "in one file and\n"
    "  duplicate keys are errors.\n"
    "- Command-line overrides `--set KEY.PATH=VALUE` are applied before the "
    "checks. VALUE is\n"
    "  YAML (`--set model.input={sparse: 100}`). List items are addressed by "
    "index\n"
    "  (`model.layers[1].dense`, `model.layers.1.dense`) or by their name "
    "(`model.layers.out.dense`;\n"
    "  a layer without a name answers to its default name, "
    "`model.layers.layer0.dense`).\n"
    "  Missing mapping keys are created. Problems in an override are "
    "reported as\n"
    "  `--set KEY.PATH=VALUE: error: KEY.PATH: message`.\n"
    "- Data paths in the file are relative to the job file's folder; data "
    "paths given with\n"
    "  `--set` are relative to the working directory. `output.dir` is always "
    "relative to the\n"
    "  working directory.\n"
    "\n"
    "## Keys\n";

/* The type column of a row. */
static void md_type(FILE *to, const ar__schema *s) {
  char range[96];
  ar__schema_range_text(s, range, sizeof range);
  switch (s->type) {
  case AR__S_MAP:
    fputs("mapping", to);
    break;
  case AR__S_LIST:
    fprintf(to, "list of mappings, at least %d", s->min_items);
    break;
  case AR__S_VARIANT:
    for (const ar__schema *k = s->kids; k->key; k++)
      fprintf(to, "%s`%s`",
              k == s->kids ? ""
              : k[1].key   ? ", "
                           : " or ",
              k->key);
    fputs(", or a mapping with one of them", to);
    break;
  case AR__S_STRING:
    fputs("string", to);
    break;
  case AR__S_NAME:
    fputs("name (no `/`)", to);
    break;
  case AR__S_PATH:
    fputs("path", to);
    break;
  case AR__S_INT:
    fprintf(to, "integer %s", range);
    break;
  case AR__S_FLOAT:
    fprintf(to, "number %s", range);
    break;
  case AR__S_ENUM:
    for (int i = 0; s->values[i]; i++)
      fprintf(to, "%s`%s`", i == 0 ? "one of " : ", ", s->values[i]);
    break;
  case AR__S_DEVICE:
    fputs("`auto`, `host` or `cuda:N`", to);
    break;
  case AR__S_RESERVED:
    fputs("reserved", to);
    break;
  }
}

static void md_default(FILE *to, const ar__schema *s) {
  if (s->required)
    fputs("**required**", to);
  else if (s->def)
    fprintf(to, "`%s`", s->def);
  else if (s->def_doc)
    fputs(s->def_doc, to);
  else
    fputs("-", to);
}

static void md_section(FILE *to, const ar__schema *s, const char *path);

/* Sections for the entries below a row, in table order. */
static void md_subsections(FILE *to, const ar__schema *s, const char *path) {
  for (const ar__schema *k = s->kids; k && k->key; k++) {
    char sub[256];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k->key);
    if (k->type == AR__S_MAP || k->type == AR__S_VARIANT) {
      md_section(to, k, sub);
    } else if (k->type == AR__S_LIST) {
      char item[sizeof sub + 2];
      snprintf(item, sizeof item, "%s[]", sub);
      md_section(to, &k->kids[0], item);
    }
  }
}

/* One heading, the entry's sentences and constraints, a table of its keys,
 * then the sections of nested mappings. */
static void md_section(FILE *to, const ar__schema *s, const char *path) {
  if (path[0])
    fprintf(to, "\n### `%s`\n\n%s\n", path, s->doc);
  else
    fprintf(to, "\n### Top level\n\n%s\n", s->doc);
  if (s->type == AR__S_VARIANT)
    fprintf(to, "\nDefault: `%s`.\n", s->def);
  for (const ar__srule *r = s->rules; r && r->kind != AR__R_END; r++) {
    if (r->kind == AR__R_ONE_OF)
      fprintf(to, "\nExactly one of `%s` and `%s` must be given: %s.\n", r->a,
              r->b, r->why);
    else
      fprintf(to, "\n`%s` and `%s` cannot be given together: %s.\n", r->a, r->b,
              r->why);
  }
  fputs("\n| key | type | default | description |\n|---|---|---|---|\n", to);
  for (const ar__schema *k = s->kids; k->key; k++) {
    fprintf(to, "| `%s` | ", k->key);
    md_type(to, k);
    fputs(" | ", to);
    md_default(to, k);
    fprintf(to, " | %s |\n", k->doc);
  }
  md_subsections(to, s, path);
}

void ar_spec_schema_markdown(FILE *to) {
  fputs(md_intro, to);
  fputs(ar__spec_example, to);
  fputs(md_rules, to);
  md_section(to, ar__schema_root(), "");
}
