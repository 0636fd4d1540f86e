# loadtest/plot/scale-create-rate.gp - scale: aggregate create rate
# against the number of clusters: each report's create-rate curve (the same
# sandboxes per cluster, pinned to the first k clusters) and each report's
# full create over all its clusters, with ideal linear scaling from the
# 1-cluster rate for reference.
#
#   gnuplot -c scale-create-rate.gp VARS TERMINAL
#
# VARS is the scale-create-rate.vars.gp written by extract.py (out_png,
# subtitle, full_dat, the xtics, curve_* arrays of n curves);
# TERMINAL pngcairo or png.
load ARG1
set terminal @ARG2 size 1000,650 noenhanced font ',10'
set output out_png
set title "scale: aggregate create rate vs number of clusters (cold creates through one router)\n".subtitle
set grid
set key top left Left reverse opaque box
set xlabel 'clusters behind the router'
set ylabel 'aggregate creates/s'
set xrange [0:k_top]
set yrange [0:y_top]
set offsets 0,0,0,0
plot for [i=1:n] curve_dat[i] using 1:2 with linespoints lw 2 pt 7 ps 1 lc i title curve_title[i], \
     for [i=1:n] curve_dat[i] using 1:2:(sprintf('%.0f/s', $2)) with labels right offset -0.3,1 tc lt i notitle, \
     full_dat using 1:2 with @full_style lw 2 dt 4 pt 9 ps 2 lc 'black' title full_title, \
     full_dat using 1:2:(sprintf('%.0f/s', $2)) with labels left offset 1.5,0 tc 'black' notitle, \
     (one_cluster_rate > 0 ? one_cluster_rate * x : NaN) with lines dt 2 lc 'gray50' \
       title 'ideal: the 1-cluster rate x clusters'
