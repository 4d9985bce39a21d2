/*
 * drivers.c: the systems tl-bench knows, in the order they are run and
 * reported. Timeline comes first: every ratio is Timeline / peer. A new
 * peer is one new file drv_<name>.c defining a tlb_driver, one line here
 * and its file in bench/CMakeLists.txt.
 */
#include <stddef.h>

#include "driver.h"

extern const tlb_driver tlb_drv_timeline;
extern const tlb_driver tlb_drv_timeline_cluster3;
extern const tlb_driver tlb_drv_beanstalkd;
extern const tlb_driver tlb_drv_redis;

const tlb_driver *const tlb_drivers[] = {
    &tlb_drv_timeline,
    &tlb_drv_timeline_cluster3,
    &tlb_drv_beanstalkd,
    &tlb_drv_redis,
};

const size_t tlb_ndrivers = sizeof(tlb_drivers) / sizeof(tlb_drivers[0]);
