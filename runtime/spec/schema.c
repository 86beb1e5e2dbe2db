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

#include "accelrt/nn.h"
#include "accelrt/spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Shorthands that keep the table readable. */
#define INT_RANGE(lo, hi) .type = AR_SCHEMA_INT, .imin = (lo), .imax = (hi)
#define FLOAT_RANGE(lo, lo_open, hi, hi_open)                                  \
  .type = AR_SCHEMA_FLOAT, .fmin = (lo), .fmin_open = (lo_open), .fmax = (hi), \
  .fmax_open = (hi_open)
#define FLOAT_ABOVE(lo) FLOAT_RANGE(lo, true, INFINITY, false)
#define FLOAT_FROM(lo) FLOAT_RANGE(lo, false, INFINITY, false)
#define FRACTION FLOAT_RANGE(0.0, false, 1.0, true) /* [0, 1) */

/* Widths and feature/label counts index int32 arrays downstream. */
#define COUNT_MAX INT32_MAX

/* ---- model ------------------------------------------------------------- */

static const ar_schema input_keys[] = {
    {.key = "sparse",
     INT_RANGE(1, COUNT_MAX),
     .doc = "Number of input features; each point is a sparse row of "
            "`feature:value` pairs (the xc and libsvm formats)."},
    {.key = "dense",
     INT_RANGE(1, COUNT_MAX),
     .doc = "Number of input features; each point is used as a dense vector "
            "of this length."},
    {.key = "image",
     .type = AR_SCHEMA_ANY,
     .doc = "`[C, H, W]`: each point is an image of C channels, H rows and W "
            "columns (the idx and npy formats); a graph model."},
    {.key = "tokens",
     INT_RANGE(1, COUNT_MAX),
     .doc = "Sequence length: each point is a sequence of this many token ids "
            "(npy, i64), with `vocab`; a graph model."},
    {.key = "vocab",
     INT_RANGE(2, COUNT_MAX),
     .doc = "With `tokens`: token ids are in [0, vocab); 0 is padding (the "
            "`mask` op)."},
    {0}};

/* spec.c maps these by position to ar_act (see convert_model). */
static const char *const act_values[] = {"relu", "sigmoid", "none", "softmax",
                                         NULL};

/* By position: ar_sparse_mode from AR_SPARSE_DENSE on. */
static const char *const sparse_mode_values[] = {"dense", "lsh", "auto", NULL};
/* By position: ar_sparse_hash. */
static const char *const hash_values[] = {"srp", "wta", "dwta", "doph", NULL};
/* By position: ar_sparse_sampling. */
static const char *const sampling_values[] = {"union", "topk", "threshold",
                                              NULL};
static const char *const insert_values[] = {"fifo", "reservoir", NULL};
static const char *const correction_values[] = {"none", "logq", NULL};

static const ar_schema rehash_keys[] = {
    {.key = "every",
     INT_RANGE(1, INT64_MAX),
     .def = "50",
     .doc = "Rebuild the hash tables from the current weights after this "
            "many iterations."},
    {.key = "growth",
     FLOAT_FROM(1.0),
     .def = "1.1",
     .doc = "Each gap between rebuilds is the previous one times this (as "
            "SLIDE does: rebuilds get rarer as training settles)."},
    {.key = "new_hash_every",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Draw new hash functions every this many iterations; 0 never."},
    {0}};

static const ar_schema sparse_keys[] = {
    {.key = "mode",
     .type = AR_SCHEMA_ENUM,
     .values = sparse_mode_values,
     .def = "auto",
     .doc = "`lsh`: always sampled (host devices only). `dense`: computed "
            "dense, the settings kept. `auto`: sampled on a host device "
            "when the layer is at least `auto_min_width` wide, dense "
            "otherwise and on GPUs, so one job file suits both."},
    {.key = "auto_min_width",
     INT_RANGE(1, COUNT_MAX),
     .def = "32768",
     .doc = "`mode: auto` samples layers at least this wide. Measured on "
            "this project's 2-core CPU (bench/lsh width sweep), sampling "
            "trains faster than the dense path from about 5,000 outputs, "
            "but at 10,000 the default 1% budget cost about 2 points of P@1 "
            "(configs/quickstart.yaml, 2 epochs: 83.9 vs 86.2, at 2.9x the "
            "speed); from 32,768 on the budget is wide enough and the "
            "speed-up large (3.5x at 32,768, 8x at 100,000)."},
    {.key = "hash",
     .type = AR_SCHEMA_ENUM,
     .values = hash_values,
     .def = "srp",
     .doc = "Hash family: `srp` (signed random projections, sparse), `wta` "
            "(winner-take-all), `dwta` (densified WTA, SLIDE's default), "
            "`doph` (densified one-permutation minhash, for binary inputs). "
            "On the dense hidden vectors of this project's benchmarks `srp` "
            "retrieved better candidates than `dwta` (Delicious P@1 66 vs "
            "55; a 100,000-label set 49 vs 21 after one epoch)."},
    {.key = "K",
     INT_RANGE(1, 64),
     .def_doc = "chosen from the width",
     .doc = "Codes per table: more codes make buckets more selective. By "
            "default the table index gets about log2(width / 16) bits, so a "
            "bucket holds some 16 neurons whatever the width (`srp`: one bit "
            "per code; `wta`, `dwta`, `doph`: three): measured here, 6 bits "
            "suit Delicious' 983 labels and 12 to 13 a 100,000-label layer, "
            "where a fixed K=6 of DWTA retrieved almost nothing.  Set here, "
            "it is also the K of `accelrt eval`'s inference tables (otherwise "
            "chosen there; `--lsh-K` sets it for one evaluation)."},
    {.key = "L",
     INT_RANGE(1, 1024),
     .def = "50",
     .doc = "Hash tables: more tables retrieve more candidates."},
    {.key = "bucket",
     INT_RANGE(1, 65535),
     .def = "128",
     .doc = "Neuron ids kept per bucket."},
    {.key = "insert",
     .type = AR_SCHEMA_ENUM,
     .values = insert_values,
     .def = "fifo",
     .doc = "A full bucket keeps its newest ids (`fifo`) or a uniform "
            "sample of all ids offered to it (`reservoir`)."},
    {.key = "sampling",
     .type = AR_SCHEMA_ENUM,
     .values = sampling_values,
     .def = "topk",
     .doc = "How candidates become the active set: `union` (bucket "
            "contents in table order up to the budget), `topk` (the ids "
            "found in most tables), `threshold` (ids found in at least "
            "`threshold` tables)."},
    {.key = "active",
     FLOAT_RANGE(0.0, true, 1.0, false),
     .def = "0.01",
     .doc = "Neurons retrieved per input, as a fraction of the layer's "
            "width (the budget of `union` and `topk`, the cap of "
            "`threshold`). In training, the true labels of an output layer "
            "are always added."},
    {.key = "min_active",
     INT_RANGE(0, COUNT_MAX),
     .def_doc = "the budget: `active` x width",
     .doc = "Fewer candidates than this are topped up with random neurons "
            "(as SLIDE does), so each input trains against enough "
            "negatives; 0 keeps only what the tables retrieve."},
    {.key = "max_active",
     INT_RANGE(0, COUNT_MAX),
     .def = "0",
     .doc = "At most this many active neurons per input (labels always "
            "kept); 0: only `active` limits."},
    {.key = "negatives",
     INT_RANGE(0, COUNT_MAX),
     .def_doc = "a graph model's head: the budget (`active` x width), at least 256 or an eighth of the width; a chain's layer: 0",
     .doc = "An output layer on a dense input (a graph model's head, a chain's "
            "output layer after a dense one): each batch also draws this many "
            "neurons uniformly at random, shared by its rows and computed by "
            "one GEMM, besides what the tables retrieve (those a row "
            "retrieved count once). Without them a layer whose inputs look "
            "alike retrieves the same few neurons for every input and never "
            "pushes the others down: a 2,000-class token set at `active: "
            "0.05` reached top-1 0.0% against the dense head's 8.1% (5.6% "
            "with them); a 1,000-class one 7.0% against 25.0% (25.5% with "
            "them). Twice the value reaching the width makes the whole "
            "layer shared (its softmax is then the dense one). 0: only the "
            "top-up of `min_active`."},
    {.key = "correction",
     .type = AR_SCHEMA_ENUM,
     .values = correction_values,
     .def_doc = "`logq` on a graph model's head, `none` on a chain's layer",
     .doc = "`logq`: the logit of each random negative a row did not retrieve "
            "gets log(width / drawn), the inverse of its chance of being "
            "drawn, so the sampled softmax's normaliser estimates the full "
            "one and the training loss is comparable with the dense head's "
            "(on the 2,000-class set 5.6% top-1 against 3.5% without). "
            "`none`: the logits as computed (SLIDE's rule). Chains keep SLIDE's "
            "rule by default: on configs/quickstart.yaml (10,000 labels, "
            "sampled, 1 epoch) the graph default cost 4.6 points of P@1 "
            "(73.8 against 78.5)."},
    {.key = "catch_up",
     INT_RANGE(0, COUNT_MAX),
     .def = "0",
     .doc = "The sampled layer's sparse Adam steps only the rows a batch "
            "touched. For the first `catch_up` iterations a row's next update "
            "first makes the moves dense Adam would have made on the steps "
            "the row missed (its decaying momentum, summed in closed form), "
            "as SLIDE's Adam over every weight does, at the touched rows' "
            "cost; after them, and with 0, those moves are dropped (lazy "
            "Adam, as TF's LazyAdam). Needs beta1 < sqrt(beta2). On the "
            "100,000-class token model (configs/tokens-slide.yaml, seed 2) "
            "catching up throughout learns much faster at first (top-1 50.35 "
            "against 20.75 after 5 epochs) but trails lazy Adam by 3.75 after "
            "28 (78.65 against 82.4); `catch_up: 25000` (8 epochs, then lazy) "
            "reached 83.0 after 16 epochs, where lazy Adam throughout had "
            "75.15 and needed 32 epochs for 82.95."},
    {.key = "rescore",
     INT_RANGE(0, 64),
     .def = "0",
     .doc = "An output layer on a dense input (a graph model's head): the "
            "tables' `rescore` x budget best candidates are scored exactly and "
            "the budget with the highest logits kept (the labels always), so "
            "each input trains against the strongest wrong classes the tables "
            "found rather than those found in most tables. Costs the "
            "candidates' logits (one dot product each) per input. 0 or 1: off."},
    {.key = "threshold",
     INT_RANGE(1, 1024),
     .def = "2",
     .doc = "`sampling: threshold`: tables an id must be found in."},
    {.key = "rehash",
     .type = AR_SCHEMA_MAP,
     .kids = rehash_keys,
     .doc = "When the tables are rebuilt from the changing weights."},
    {0}};

static const char *const bool_values[] = {"false", "true", NULL};

/* The op names of include/accelrt/nn.h (AR_NN_OP_MAP), by position. */
static const char *const op_values[] = {
#define AR__OP_NAME(e, name, group) name,
    AR_NN_OP_MAP(AR__OP_NAME)
#undef AR__OP_NAME
        NULL};

static const ar_schema layer_item[2];

static const ar_schema layer_keys[] = {
    {.key = "name",
     .type = AR_SCHEMA_NAME,
     .def_doc = "`layer<i>`, with i the position in the list counted from 0",
     .doc = "Names the layer in summaries, checkpoints and `--set` paths "
            "(`model.layers.NAME.dense=...`), and in other items' `inputs`. "
            "Names must be unique."},
    {.key = "dense",
     INT_RANGE(1, COUNT_MAX),
     .doc = "A fully connected layer with this many outputs (neurons). The "
            "last layer's width is the number of labels (classes). Each item "
            "has exactly one of `dense`, `conv`, `op` or `repeat`."},
    {.key = "conv",
     INT_RANGE(1, COUNT_MAX),
     .doc = "A 2-D convolution with this many output channels (`kernel`, "
            "`stride`, `padding`, `dilation`, `groups`, `bias`); graph models."},
    {.key = "op",
     .type = AR_SCHEMA_ENUM,
     .values = op_values,
     .doc = "Any other operation of a graph model, by name "
            "(docs/graph.md lists each with its keys)."},
    {.key = "inputs",
     .type = AR_SCHEMA_ANY,
     .doc = "Names of earlier items this one reads (a list, or one name); "
            "default: the item before it (the model's input for the first). "
            "Residual adds and concatenated branches are written this way. "
            "Inside a `block`, `input` names the block's input."},
    {.key = "repeat",
     INT_RANGE(1, 1000),
     .doc = "With `block`: the items of `block` this many times in a row, "
            "each copy with its own parameters, named NAME.I.ITEM."},
    {.key = "block",
     .type = AR_SCHEMA_LIST,
     .min_items = 1,
     .kids = layer_item,
     .doc = "The items `repeat` copies."},
    {.key = "activation",
     .type = AR_SCHEMA_ENUM,
     .values = act_values,
     .def_doc = "`relu`; `softmax` on the last layer",
     .doc = "The last layer's activation picks the loss and must be `softmax` "
            "(softmax cross-entropy over the labels) or `sigmoid` (binary "
            "cross-entropy per label). `softmax` is only allowed on the last "
            "layer. In a graph model: fused into `conv` and `batchnorm` "
            "(`relu` or `none`, default `none`) and `dense` (default `relu`)."},
    {.key = "kernel", .type = AR_SCHEMA_ANY, .doc = "`conv`, pooling: K or [KH, KW]."},
    {.key = "stride", .type = AR_SCHEMA_ANY, .doc = "`conv`, pooling: S or [SH, SW] (default 1; pooling: the kernel)."},
    {.key = "padding", .type = AR_SCHEMA_ANY,
     .doc = "`conv`, pooling: P, [PH, PW] or [top, left, bottom, right] (default 0); "
            "`pad`: [before, after] per dimension after the batch's."},
    {.key = "dilation", .type = AR_SCHEMA_ANY, .doc = "`conv`: D or [DH, DW] (default 1)."},
    {.key = "groups", .only_given = true, INT_RANGE(1, COUNT_MAX), .def = "1", .doc = "`conv`: channel groups."},
    {.key = "bias", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "true",
     .doc = "`conv`, `dense`: add a bias."},
    {.key = "eps", .only_given = true, FLOAT_ABOVE(0.0), .def = "1e-5", .doc = "`batchnorm`, `layernorm`."},
    {.key = "momentum", .only_given = true, FLOAT_RANGE(0.0, false, 1.0, false), .def = "0.1",
     .doc = "`batchnorm`: weight of the batch in the running statistics."},
    {.key = "alpha", .only_given = true, FLOAT_FROM(0.0), .def = "0.01", .doc = "`leaky_relu`: the negative slope."},
    {.key = "p", .only_given = true, FRACTION, .def = "0.1", .doc = "`dropout`: probability of dropping."},
    {.key = "scalar", .only_given = true, .type = AR_SCHEMA_FLOAT, .fmin = -INFINITY, .fmax = INFINITY,
     .def = "0", .doc = "`add`, `sub`, `mul`, `div`, `pow` with one input: the "
                       "second operand; `pad`: the value."},
    {.key = "axis", .only_given = true, INT_RANGE(-6, 5), .def = "-1",
     .doc = "`softmax`, `concat`, `split`, `slice`, `mean`, `sum`: the axis (0 is the "
            "batch's; negative counts from the end)."},
    {.key = "all", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "false",
     .doc = "`mean`, `sum`: over every axis but the batch's."},
    {.key = "keepdims", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "false",
     .doc = "`mean`, `sum`: keep reduced axes as 1."},
    {.key = "begin", .only_given = true, INT_RANGE(0, INT64_MAX), .def = "0", .doc = "`slice`."},
    {.key = "end", .only_given = true, INT_RANGE(0, INT64_MAX), .def = "0", .doc = "`slice` (0: to the end)."},
    {.key = "sizes", .type = AR_SCHEMA_ANY, .doc = "`split`: the parts' sizes along `axis`."},
    {.key = "shape", .type = AR_SCHEMA_ANY,
     .doc = "`reshape`: the shape after the batch's dimension (one -1 inferred)."},
    {.key = "perm", .type = AR_SCHEMA_ANY,
     .doc = "`transpose`: the order of the dimensions after the batch's (0-based among them)."},
    {.key = "width", INT_RANGE(1, COUNT_MAX), .doc = "`embedding`: the vector length."},
    {.key = "vocab", INT_RANGE(1, COUNT_MAX),
     .def_doc = "`model.input.vocab`", .doc = "`embedding`: the number of token ids."},
    {.key = "pad_id", .only_given = true, INT_RANGE(0, INT64_MAX), .def = "0", .doc = "`mask`: the padding id."},
    {.key = "heads", .only_given = true, INT_RANGE(1, 1024), .def = "1", .doc = "`attention`: heads."},
    {.key = "causal", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "false",
     .doc = "`attention`: each position sees only those before it."},
    {.key = "transpose_b", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "false",
     .doc = "`matmul`: multiply by the second input's transpose (its last two axes)."},
    {.key = "sparse_grad", .only_given = true, .type = AR_SCHEMA_ENUM, .values = bool_values, .def = "false",
     .doc = "`embedding`: the backward and the optimizer touch only the rows of the ids in the "
            "batch (lazy: SGD's momentum, Adam's moments and weight decay move those rows only, "
            "as PyTorch's SparseAdam); host and CUDA, not under `distributed:`."},
    {.key = "sparse",
     .type = AR_SCHEMA_MAP,
     .kids = sparse_keys,
     .doc = "Run this layer LSH-sampled (SLIDE): hash tables over the "
            "neurons' weights pick, per input, the few neurons worth "
            "computing, and only those are computed and updated. Host "
            "devices only; see `mode`."},
    {0}};

static const char *const onnx_loss_values[] = {"softmax_ce", "sigmoid_bce", NULL};

static const ar_schema layer_item[2] = {{.key = "item",
                                         .type = AR_SCHEMA_MAP,
                                         .kids = layer_keys,
                                         .doc = "One layer or operation."},
                                        {0}};

static const ar_schema model_keys[] = {
    {.key = "input",
     .type = AR_SCHEMA_MAP,
     .required = true,
     .kids = input_keys,
     .doc = "The shape of one input point: exactly one of `sparse: N`, "
            "`dense: N`, `image: [C, H, W]` or `tokens: T` (with `vocab`). "
            "With `data.generate`, N must equal `data.generate.features`."},
    {.key = "layers",
     .type = AR_SCHEMA_LIST,
     .min_items = 1,
     .kids = layer_item,
     .doc = "The layers from input to output, at least one. The last one is "
            "the output layer; with `data.generate` its width must equal "
            "`data.generate.labels`. Exactly one of `layers` and `onnx`."},
    {.key = "onnx",
     .type = AR_SCHEMA_PATH,
     .doc = "An ONNX model file (opsets 7 to 17; docs/onnx.md) instead of `layers`: "
            "its one input takes `model.input` with the batch first, its one output "
            "is the logits, its initializers are the exact initial parameters. A "
            "relative path is taken from the job file's folder."},
    {.key = "sparse",
     .type = AR_SCHEMA_ANY,
     .doc = "With `onnx`: `{NODE: {...}}` gives the imported model's node NODE (its last "
            "Gemm, PyTorch's Linear producing the logits) a `sparse` section exactly as a "
            "layer's (`model.layers[].sparse`): it trains LSH-sampled (docs/graph.md)."},
    {.key = "loss",
     .type = AR_SCHEMA_ENUM,
     .values = onnx_loss_values,
     .def = "softmax_ce",
     .doc = "With `onnx`: the loss on the model's output; `softmax_ce` (softmax "
            "cross-entropy against one class id per point) or `sigmoid_bce` (one "
            "sigmoid cross-entropy per class, averaged, against multi-hot targets: "
            "`data.format: npy` with y.npy of shape (N, C), u8 or f32)."},
    {0}};

/* ---- data -------------------------------------------------------------- */

static const ar_schema generate_keys[] = {
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
     .doc = "Feature count; must equal the N of `model.input` (a token set: its "
            "sequence length, `model.input.tokens`; the token ids are below "
            "`model.input.vocab`, and the class says which of two marker tokens "
            "comes first, so only order tells it; `accelrt gen-data --shape "
            "tokens` writes the same sets)."},
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

/* By position: AR_FMT_XC, AR_FMT_LIBSVM, AR_FMT_IDX, AR_FMT_NPY. */
static const char *const format_values[] = {"xc", "libsvm", "idx", "npy", NULL};

static const ar_schema augment_keys[] = {
    {.key = "crop_pad",
     INT_RANGE(0, 64),
     .def = "0",
     .doc = "Pad each training image by this many pixels and crop it back at "
            "a random offset; 0: no cropping."},
    {.key = "flip",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .doc = "Mirror each training image horizontally with probability 1/2."},
    {0}};

static const ar_schema data_keys[] = {
    {.key = "train",
     .type = AR_SCHEMA_PATH,
     .doc = "Training data file. A relative path is taken from the job "
            "file's folder (from the working directory when given with "
            "`--set`)."},
    {.key = "test",
     .type = AR_SCHEMA_PATH,
     .doc = "Test data file, resolved like `train`. Without it there is no "
            "test evaluation."},
    {.key = "train_labels",
     .type = AR_SCHEMA_PATH,
     .def_doc = "by the MNIST naming rule",
     .doc = "`format: idx`: the training labels file, when its name does not "
            "follow from `train` (`-images-idx3-ubyte` to `-labels-idx1-ubyte`)."},
    {.key = "test_labels",
     .type = AR_SCHEMA_PATH,
     .def_doc = "by the MNIST naming rule",
     .doc = "`format: idx`: the test labels file."},
    {.key = "normalize",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "true",
     .doc = "Images: subtract each channel's mean and divide by its standard "
            "deviation, both measured on the training split."},
    {.key = "augment",
     .type = AR_SCHEMA_MAP,
     .kids = augment_keys,
     .doc = "Seeded augmentation of training images (evaluation never augments)."},
    {.key = "format",
     .type = AR_SCHEMA_ENUM,
     .values = format_values,
     .def = "xc",
     .doc = "`xc`: the Extreme Classification Repository format (a header "
            "line `points features labels`, then `l1,l2 f:v f:v` per point, "
            "0-based ids). `libsvm`: no header, feature ids 1-based. `idx`: "
            "the MNIST family's images file (`.gz` allowed), labels by "
            "`train_labels` or the naming rule. `npy`: a folder with `x.npy` "
            "and `y.npy` (class ids; or (N, C) u8/f32 targets for `model.loss: "
            "sigmoid_bce`). idx and npy train graph models with "
            "one class per point (npy targets: several)."},
    {.key = "shuffle_window",
     INT_RANGE(0, INT64_MAX),
     .def = "65536",
     .doc = "Rows shuffled together while streaming the training file; 0 "
            "keeps the file order."},
    {.key = "generate",
     .type = AR_SCHEMA_MAP,
     .kids = generate_keys,
     .doc = "Generate a synthetic dataset before training, instead of reading "
            "files: an extreme-classification set with planted structure, or, for "
            "`model.input.tokens` with `format: npy`, a token set whose class "
            "depends only on token order (2 classes)."},
    {0}};

static const ar_schema_rule data_rules[] = {
    {AR_SCHEMA_ONE_OF, "train", "generate",
     "the training data comes from a file or from the generator"},
    {AR_SCHEMA_CONFLICT, "test", "generate",
     "the generator writes its own test set"},
    {0}};

/* ---- train ------------------------------------------------------------- */

static const ar_schema adam_keys[] = {
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
    {.key = "decoupled",
     .type = AR_SCHEMA_ENUM,
     .values = bool_values,
     .def = "false",
     .doc = "Graph models: AdamW (Loshchilov & Hutter) — the weights shrink by lr x "
            "weight_decay each step instead of the penalty entering the gradient."},
    {0}};

static const ar_schema sgd_keys[] = {
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

static const ar_schema optimizer_kinds[] = {
    {.key = "adam",
     .type = AR_SCHEMA_MAP,
     .kids = adam_keys,
     .doc = "Adam (Kingma & Ba, 2015)."},
    {.key = "sgd",
     .type = AR_SCHEMA_MAP,
     .kids = sgd_keys,
     .doc = "Stochastic gradient descent with momentum."},
    {0}};

/* By position: ar_init_kind (AR_INIT_AUTO, AR_INIT_HE, AR_INIT_XAVIER). */
static const char *const init_values[] = {"auto", "he", "xavier", NULL};

static const char *const schedule_values[] = {"constant", "step", "cosine", NULL};

static const ar_schema schedule_keys[] = {
    {.key = "kind",
     .type = AR_SCHEMA_ENUM,
     .values = schedule_values,
     .def = "constant",
     .doc = "`constant`; `step` (times `gamma` every `step_every` "
            "iterations); `cosine` (from lr to `min_lr` over the run)."},
    {.key = "warmup",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "Iterations of linear warm-up from lr/warmup to lr first."},
    {.key = "step_every", INT_RANGE(1, INT64_MAX), .def = "1000", .doc = "`step`."},
    {.key = "gamma", FLOAT_ABOVE(0.0), .def = "0.1", .doc = "`step`: the factor."},
    {.key = "min_lr", FLOAT_FROM(0.0), .def = "0", .doc = "`cosine`: the final rate."},
    {0}};

static const ar_schema train_keys[] = {
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
     .doc = "Host threads; 0 takes the CPUs this process was given: "
            "`OMP_NUM_THREADS`, else `SLURM_CPUS_PER_TASK`, else one per core of "
            "its affinity mask (taskset), within the cgroup's `cpu.max`.  Never "
            "more than the CPUs of the mask; `accelrt info` says which."},
    {.key = "optimizer",
     .type = AR_SCHEMA_VARIANT,
     .kids = optimizer_kinds,
     .def = "adam",
     .doc = "`adam` or `sgd` with their defaults, or a mapping with one of "
            "them as its only key to set their parameters, e.g. "
            "`{sgd: {lr: 0.05}}`."},
    {.key = "init",
     .type = AR_SCHEMA_ENUM,
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
    {.key = "log_every",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .only_given = true,
     .doc = "Graph models: a metrics.jsonl line `{\"kind\": \"train\", ...}` "
            "with the batch's loss and the learning rate every this many "
            "iterations; 0: none."},
    {.key = "schedule",
     .type = AR_SCHEMA_MAP,
     .kids = schedule_keys,
     .doc = "Graph models: how the learning rate changes over the run."},
    {0}};

/* ---- runtime, distributed -------------------------------------------------- */

/* Indexed by ar_policy_kind (AR_POLICY_MAP). */
static const char *const policy_values[] = {
#define AR__POLICY_TEXT(name, text) text,
    AR_POLICY_MAP(AR__POLICY_TEXT)
#undef AR__POLICY_TEXT
        NULL};

const char *ar_policy_name(ar_policy_kind k) {
  return (unsigned)k < AR_POLICY_COUNT ? policy_values[k] : policy_values[AR_POLICY_FIFO];
}

bool ar_policy_parse(const char *name, ar_policy_kind *out) {
  for (int k = 0; name && k < AR_POLICY_COUNT; k++)
    if (!strcmp(name, policy_values[k])) {
      *out = (ar_policy_kind)k;
      return true;
    }
  return false;
}

const char *ar_policy_names(void) {
  /* ", fifo, pack, ..." without its first separator. */
#define AR__POLICY_LIST(name, text) ", " text
  static const char list[] = AR_POLICY_MAP(AR__POLICY_LIST);
#undef AR__POLICY_LIST
  return list + 2;
}

static const ar_schema runtime_keys[] = {
    {.key = "policy",
     .type = AR_SCHEMA_ENUM,
     .values = policy_values,
     .def = "fifo",
     .doc = "How the jobs of a `jobs:` file share the device (Salus): "
            "`fifo` one at a time in arrival order, `pack` as many lanes "
            "as fit, `srtf` shortest remaining time first, `fair` equal "
            "device time, `priority` by each job's `priority`."},
    {.key = "memory",
     .type = AR_SCHEMA_SIZE,
     .def_doc = "the device's free memory",
     .doc = "Device memory the jobs may use, as bytes with a unit "
            "(`8GiB`, `512MiB`, `4GB`) or a percentage of the free memory "
            "(`90%`)."},
    {.key = "poisson_mean_s",
     FLOAT_FROM(0.0),
     .def = "0",
     .doc = "When above 0, jobs without an `arrival` arrive as a Poisson "
            "process with this mean gap in seconds (seeded by `seed`), in "
            "list order."},
    {0}};

/* By position: ar_order_kind. */
static const char *const order_values[] = {"none", "random", "tic", "tac",
                                           NULL};

static const ar_schema link_keys[] = {
    {.key = "gbps",
     FLOAT_ABOVE(0.0),
     .required = true,
     .doc = "Bandwidth of each parameter server's port, in gigabits per "
            "second: the parameters it sends and the gradients it receives "
            "are each paced at this rate by a token bucket at the server "
            "(the fan-in a real server link has)."},
    {.key = "latency_us",
     FLOAT_FROM(0.0),
     .def = "0",
     .doc = "Latency added to each transfer, in microseconds."},
    {0}};

static const char *const worker_sparse_values[] = {"auto", "dense", NULL};

/* By position: ar_share_tenants. */
static const char *const share_tenants_values[] = {"once", "steady", NULL};

static const ar_schema worker_keys[] = {
    {.key = "device",
     .type = AR_SCHEMA_DEVICE,
     .def_doc = "the job's `device`",
     .doc = "Where this worker computes: `host`, `cuda:N`, or `auto` (a "
            "CUDA device when the build has CUDA and one is present, the "
            "host otherwise). A GPU worker receives its parameters and "
            "sends its gradients through host buffers (MPI moves host "
            "memory) and computes sampled layers dense."},
    {.key = "sparse",
     .type = AR_SCHEMA_ENUM,
     .values = worker_sparse_values,
     .def = "auto",
     .doc = "`auto`: layers with a `sparse` section run as their mode says "
            "on this worker's device (LSH-sampled on a host). `dense`: this "
            "worker computes every layer dense (its gradients are then "
            "dense and the server applies them densely)."},
    {0}};

static const ar_schema worker_item[] = {{.key = "item",
                                         .type = AR_SCHEMA_MAP,
                                         .kids = worker_keys,
                                         .doc = "One worker's settings."},
                                        {0}};

static const ar_schema distributed_keys[] = {
    {.key = "servers",
     INT_RANGE(1, 65536),
     .def = "1",
     .doc = "The first this many MPI ranks are parameter servers; the "
            "others are workers (at least one)."},
    {.key = "order",
     .type = AR_SCHEMA_ENUM,
     .values = order_values,
     .def = "tac",
     .doc = "Order of the parameter transfers on each server-worker "
            "channel (TicTac): `none` (as ready), `random` (a seeded "
            "shuffle per iteration), `tic` (from the graph alone), `tac` "
            "(from the graph and measured op times)."},
    {.key = "trace_iterations",
     INT_RANGE(1, 1000),
     .def = "3",
     .doc = "Iterations traced to measure op times before the schedule is "
            "computed; they are reported as warm-up."},
    {.key = "link",
     .type = AR_SCHEMA_MAP,
     .kids = link_keys,
     .doc = "Emulate a slower network for testbeds on one machine or a "
            "fast fabric. Off when absent."},
    {.key = "max_bytes_in_flight",
     INT_RANGE(0, INT64_MAX),
     .def = "0",
     .doc = "At most this many bytes posted and not yet received per "
            "channel; 0 for no bound."},
    {.key = "schedule",
     .type = AR_SCHEMA_PATH,
     .doc = "A schedule file: read when it exists, else written once "
            "computed. Relative to the job file's folder."},
    {.key = "share",
     .type = AR_SCHEMA_PATH,
     .doc = "A job file with `jobs:` whose jobs share each worker's "
            "device (its host or its GPU) with it through lanes (Salus): "
            "the worker is one more "
            "tenant, admitted on its exact memory plan, and the file's "
            "`runtime.policy` decides which job runs each next iteration. "
            "Every worker runs its own copy of those jobs; their outputs go "
            "to `OUTPUT/share/worker<i>/`. Relative to the job file's "
            "folder; `none` (the default) keeps each worker's device its own."},
    {.key = "share_tenants",
     .type = AR_SCHEMA_ENUM,
     .values = share_tenants_values,
     .def = "once",
     .doc = "How long `share`'s jobs load each worker's device. `once`: "
            "each job runs its iterations once, ending before a long job or "
            "running on after a short one (a fixed amount of work, which "
            "costs a short job relatively more). `steady`: as long as this "
            "job runs: a job that ran its iterations starts again (a fresh "
            "run of it, its outputs replaced), and when this worker's last "
            "iteration ends each job is stopped at its next iteration "
            "(checkpoint and summary written, `interrupted`), so the load is "
            "the same whatever the job's length. Under `fair` the worker is "
            "charged its turns less its waits for the other ranks "
            "(`device_s` in the share folder's `metrics.jsonl`): charged in "
            "full, those waits went to its co-tenants too and, with a steady "
            "load, lengthened its iterations without bound (before "
            "2026-12-02)."},
    {.key = "workers",
     .type = AR_SCHEMA_LIST,
     .kids = worker_item,
     .doc = "Per-worker settings, item i for worker i (MPI rank servers + "
            "i); workers past the list use the defaults. A job may mix "
            "host and GPU workers, and sampled and dense ones: the servers "
            "keep one model."},
    {0}};

/* ---- output and the top level ------------------------------------------ */

static const ar_schema output_keys[] = {
    {.key = "dir",
     .type = AR_SCHEMA_PATH,
     .def_doc = "`runs/<name>`",
     .doc = "Folder for metrics, checkpoints, traces and the description of "
            "the run (`job.resolved.yaml`, `run.json`), relative to the "
            "working directory (not to the job file). `accelrt run` refuses a "
            "folder that holds a finished run (its `summary.json`) unless "
            "given `--resume` or `--overwrite`."},
    {0}};

/* One item of `jobs:`: a job of its own. */
static const ar_schema job_keys[] = {
    {.key = "name",
     .type = AR_SCHEMA_NAME,
     .def_doc = "`job<i>`, with i the position in the list counted from 0",
     .doc = "Names the job; with `repeat`, copies are NAME-1, NAME-2, ..."},
    {.key = "seed",
     INT_RANGE(0, INT64_MAX),
     .def_doc = "the top-level `seed` plus the job's position",
     .doc = "Seeds this job."},
    {.key = "model",
     .type = AR_SCHEMA_MAP,
     .required = true,
     .kids = model_keys,
     .doc = "The job's network, as the top-level `model`."},
    {.key = "data",
     .type = AR_SCHEMA_MAP,
     .required = true,
     .kids = data_keys,
     .rules = data_rules,
     .doc = "The job's data, as the top-level `data`."},
    {.key = "train",
     .type = AR_SCHEMA_MAP,
     .required = true,
     .kids = train_keys,
     .doc = "How the job trains, as the top-level `train`."},
    {.key = "output",
     .type = AR_SCHEMA_MAP,
     .kids = output_keys,
     .doc = "Where the job's results go; default `OUTPUT/NAME` with OUTPUT "
            "the file's `output.dir`."},
    {.key = "arrival",
     FLOAT_FROM(0.0),
     .def_doc = "0, or drawn when `runtime.poisson_mean_s` is set",
     .doc = "Seconds after the start of the run at which the job is "
            "submitted."},
    {.key = "priority",
     INT_RANGE(-1000000, 1000000),
     .def = "0",
     .doc = "With `runtime.policy: priority`, higher runs first."},
    {.key = "repeat",
     INT_RANGE(1, 10000),
     .def = "1",
     .doc = "Submit this many copies of the job (seeds differ, arrivals "
            "as for separate items)."},
    {0}};

static const ar_schema job_item[] = {
    {.key = "item", .type = AR_SCHEMA_MAP, .kids = job_keys, .doc = "One job."},
    {0}};

static const ar_schema top_keys[] = {
    {.key = "name",
     .type = AR_SCHEMA_NAME,
     .def_doc = "the job file's name without its extension",
     .doc = "Names the job in logs, metrics and the default output folder."},
    {.key = "device",
     .type = AR_SCHEMA_DEVICE,
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
     .type = AR_SCHEMA_MAP,
     .def_doc = "**required** unless `jobs` is given",
     .kids = model_keys,
     .doc = "The network."},
    {.key = "data",
     .type = AR_SCHEMA_MAP,
     .def_doc = "**required** unless `jobs` is given",
     .kids = data_keys,
     .rules = data_rules,
     .doc = "Where the points come from: exactly one of `train` (files) or "
            "`generate` (synthetic)."},
    {.key = "train",
     .type = AR_SCHEMA_MAP,
     .def_doc = "**required** unless `jobs` is given",
     .kids = train_keys,
     .doc = "How long and how to train."},
    {.key = "output",
     .type = AR_SCHEMA_MAP,
     .kids = output_keys,
     .doc = "Where results go."},
    {.key = "runtime",
     .type = AR_SCHEMA_MAP,
     .kids = runtime_keys,
     .doc = "How the jobs of this file share one device (lanes, Salus)."},
    {.key = "distributed",
     .type = AR_SCHEMA_MAP,
     .kids = distributed_keys,
     .doc = "Train over MPI with parameter servers and ordered transfers "
            "(TicTac): run with `mpirun -np N accelrt run JOB.yaml`."},
    {.key = "jobs",
     .type = AR_SCHEMA_LIST,
     .min_items = 1,
     .kids = job_item,
     .doc = "Several jobs in one run, sharing the device under `runtime`. "
            "With `jobs`, the top level has no `model`, `data` or "
            "`train`; `device` and `runtime` apply to all jobs."},
    {0}};

static const ar_schema_rule top_rules[] = {
    {AR_SCHEMA_ONE_OF, "model", "jobs",
     "a job file describes one job (model, data, train) or lists several "
     "under jobs"},
    {AR_SCHEMA_CONFLICT, "jobs", "data", "each job of jobs has its own data"},
    {AR_SCHEMA_CONFLICT, "jobs", "train", "each job of jobs has its own train"},
    {AR_SCHEMA_CONFLICT, "jobs", "distributed",
     "a multi-job file shares one device; run a distributed job on its own "
     "with mpirun"},
    {0}};

static const ar_schema root_entry = {
    .key = "",
    .type = AR_SCHEMA_MAP,
    .kids = top_keys,
    .rules = top_rules,
    .doc = "A job file is one YAML mapping with these keys."};

const ar_schema *ar__schema_root(void) { return &root_entry; }

const ar_schema *ar__schema_kid(const ar_schema *parent, const char *key,
                                size_t len) {
  if (!parent || !parent->kids)
    return NULL;
  for (const ar_schema *k = parent->kids; k->key; k++)
    if (strlen(k->key) == len && memcmp(k->key, key, len) == 0)
      return k;
  return NULL;
}

char *ar__schema_range_text(const ar_schema *s, char *buf, size_t cap) {
  buf[0] = '\0';
  if (s->type == AR_SCHEMA_INT) {
    if (s->imax == INT64_MAX)
      snprintf(buf, cap, ">= %" PRId64, s->imin);
    else
      snprintf(buf, cap, "between %" PRId64 " and %" PRId64, s->imin, s->imax);
  } else if (s->type == AR_SCHEMA_FLOAT) {
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
    "`FILE:LINE:COL: error: KEY.PATH: message`.  `accelrt check JOB.yaml "
    "--print` prints the\n"
    "job as it will run (every `--set` applied, defaults filled in), which "
    "`accelrt run` keeps as\n"
    "`job.resolved.yaml` in `output.dir`.  `accelrt schema --json` prints "
    "this table as a JSON\n"
    "Schema for editors (docs/job-file.schema.json; see the README's Job "
    "files section).\n"
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
static void md_type(FILE *to, const ar_schema *s) {
  char range[96];
  ar__schema_range_text(s, range, sizeof range);
  switch (s->type) {
  case AR_SCHEMA_MAP:
    fputs("mapping", to);
    break;
  case AR_SCHEMA_LIST:
    fprintf(to, "list of mappings, at least %d", s->min_items);
    break;
  case AR_SCHEMA_VARIANT:
    for (const ar_schema *k = s->kids; k->key; k++)
      fprintf(to, "%s`%s`",
              k == s->kids ? ""
              : k[1].key   ? ", "
                           : " or ",
              k->key);
    fputs(", or a mapping with one of them", to);
    break;
  case AR_SCHEMA_STRING:
    fputs("string", to);
    break;
  case AR_SCHEMA_NAME:
    fputs("name (no `/`)", to);
    break;
  case AR_SCHEMA_PATH:
    fputs("path", to);
    break;
  case AR_SCHEMA_INT:
    fprintf(to, "integer %s", range);
    break;
  case AR_SCHEMA_FLOAT:
    fprintf(to, "number %s", range);
    break;
  case AR_SCHEMA_ENUM:
    for (int i = 0; s->values[i]; i++)
      fprintf(to, "%s`%s`", i == 0 ? "one of " : ", ", s->values[i]);
    break;
  case AR_SCHEMA_DEVICE:
    fputs("`auto`, `host` or `cuda:N`", to);
    break;
  case AR_SCHEMA_SIZE:
    fputs("bytes with a unit (`8GiB`) or a percentage (`90%`)", to);
    break;
  case AR_SCHEMA_RESERVED:
    fputs("reserved", to);
    break;
  case AR_SCHEMA_ANY:
    fputs("see the description", to);
    break;
  }
}

static void md_default(FILE *to, const ar_schema *s) {
  if (s->required)
    fputs("**required**", to);
  else if (s->def)
    fprintf(to, "`%s`", s->def);
  else if (s->def_doc)
    fputs(s->def_doc, to);
  else
    fputs("-", to);
}

static void md_section(FILE *to, const ar_schema *s, const char *path);

/* Sections for the entries below a row, in table order. */
/* A nested entry that reuses a top-level table (jobs[].model is the
 * top-level model) is documented once, at the top level. */
static bool md_shared(const ar_schema *k, const char *path) {
  if (!path[0])
    return false;
  for (const ar_schema *t = top_keys; t->key; t++)
    if (t != k && t->kids && t->kids == k->kids)
      return true;
  return false;
}

static void md_subsections(FILE *to, const ar_schema *s, const char *path) {
  for (const ar_schema *k = s->kids; k && k->key; k++) {
    if (md_shared(k, path))
      continue;
    char sub[256];
    snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", k->key);
    if (k->type == AR_SCHEMA_MAP || k->type == AR_SCHEMA_VARIANT) {
      md_section(to, k, sub);
    } else if (k->type == AR_SCHEMA_LIST && strcmp(k->key, "block") == 0) {
      continue; /* model.layers[] again: documented once */
    } else if (k->type == AR_SCHEMA_LIST) {
      char item[sizeof sub + 2];
      snprintf(item, sizeof item, "%s[]", sub);
      md_section(to, &k->kids[0], item);
    }
  }
}

/* One heading, the entry's sentences and constraints, a table of its keys,
 * then the sections of nested mappings. */
static void md_section(FILE *to, const ar_schema *s, const char *path) {
  if (path[0])
    fprintf(to, "\n### `%s`\n\n%s\n", path, s->doc);
  else
    fprintf(to, "\n### Top level\n\n%s\n", s->doc);
  if (s->type == AR_SCHEMA_VARIANT)
    fprintf(to, "\nDefault: `%s`.\n", s->def);
  for (const ar_schema_rule *r = s->rules; r && r->kind != AR_SCHEMA_RULES_END;
       r++) {
    if (r->kind == AR_SCHEMA_ONE_OF)
      fprintf(to, "\nExactly one of `%s` and `%s` must be given: %s.\n", r->a,
              r->b, r->why);
    else
      fprintf(to, "\n`%s` and `%s` cannot be given together: %s.\n", r->a, r->b,
              r->why);
  }
  fputs("\n| key | type | default | description |\n|---|---|---|---|\n", to);
  for (const ar_schema *k = s->kids; k->key; k++) {
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
