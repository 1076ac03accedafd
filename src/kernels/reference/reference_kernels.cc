// Instantiates the reference backend for the number types the project uses (the template in
// reference_kernels.h serves any other type).
#include "kernels/reference/reference_kernels.h"

namespace hp {

template std::unique_ptr<KernelsT<float>> make_reference_kernels<float>();
template std::unique_ptr<KernelsT<double>> make_reference_kernels<double>();

}  // namespace hp
