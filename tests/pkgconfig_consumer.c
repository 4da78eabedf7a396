/* tests/pkgconfig_consumer.c: a program of an engine's, built against an
 * installed kvcal through `pkg-config kvcal` alone (tests/test_build.c).
 * Validates the scales file argv[1] and prints "<format> passes" or
 * "<format> fails"; exit 0 when it could validate, 1 otherwise. */
#include <stdio.h>

#include <kvcal.h>

int main(int argc, char **argv)
{
    kvcal_report_t *report = NULL;
    if (argc != 2) {
        fprintf(stderr, "usage: pkgconfig_consumer SCALES_FILE\n");
        return 1;
    }
    if (kvcal_scales_validate_file(argv[1], NULL, 1, &report) != KVCAL_OK) {
        fprintf(stderr, "pkgconfig_consumer: %s\n", kvcal_last_error());
        return 1;
    }
    printf("kvcal %s, %d CUDA devices: %s %s\n", kvcal_version(),
           kvcal_cuda_device_count(), kvcal_format_name(kvcal_report_format(report)),
           kvcal_report_passes(report, 0) ? "passes" : "fails");
    kvcal_report_destroy(report);
    return 0;
}
