/*
 * The broker's log lines: the one logger of base/log.h under the name
 * "timelined". Every line has a level and a stable id (docs/timelined.md
 * lists them); the level is set with tli_log_set_level.
 */
#ifndef TL_BROKER_TLB_LOG_H
#define TL_BROKER_TLB_LOG_H

#include "log.h"

#define TLB_ERROR TLI_LOG_ERROR
#define TLB_WARN TLI_LOG_WARN
#define TLB_INFO TLI_LOG_INFO
#define TLB_DEBUG TLI_LOG_DEBUG

/* A log line: level, a stable id (e.g. "S010"), printf text. */
#define tlb_log(lvl, id, ...) tli_log("timelined", lvl, id, __VA_ARGS__)

#endif
