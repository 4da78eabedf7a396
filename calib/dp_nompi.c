/* calib/dp_nompi.c: what a build without MPI has in place of calib/dp_mpi.c. */
#include "calib/dp.h"

#include "core/status.h"

int kvcal_dp_have_mpi(void)
{
    return 0;
}

kvcal_status kvcal_dp_mpi_create(const kvcal_dp_launch *launch, kvcal_dp_group **out)
{
    *out = NULL;
    return kvcal_fail(KVCAL_ERR_UNSUPPORTED,
                      "launched as rank %d of %d by mpirun, but this kvcal was built "
                      "without MPI: install Open MPI (make deps: openmpi-bin "
                      "libopenmpi-dev) and rebuild",
                      launch ? launch->rank : 0, launch ? launch->size : 0);
}
