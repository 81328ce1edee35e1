// An op's functor (math.h: <Name>Math) from its attribute values as the kernels take them: the
// functor's members are the op's attributes in its descriptor's order, so it is
// Math{a[0], ..., a[n-1]} (Math{} for an op without attributes). Host code: the kernel bindings of
// cpu_ops.h and cuda_ops.cuh build it, the CUDA kernels get it by value.
#pragma once

#include <cstddef>
#include <utility>

#include "opforge/kernels/attrs.h"

namespace opforge::kernels {

template <class Math, size_t... I>
constexpr Math functor_of(const AttrValues& a, std::index_sequence<I...>) {
  return Math{a[I]...};
}

template <class Math, const OpDesc& Desc>
constexpr Math functor_of(const AttrValues& a) {
  return functor_of<Math>(a, std::make_index_sequence<size_t(Desc.nb_attrs)>{});
}

}  // namespace opforge::kernels
